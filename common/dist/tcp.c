// tcp.c: one TCP connect to a host by name (tcp.h).
#define _POSIX_C_SOURCE 200809L
#include "tcp.h"

#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <sys/socket.h>
#include <unistd.h>

int tcp_connect(const char *host, const char *port, int *gai_err) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *list = NULL;
  *gai_err = getaddrinfo(host, port, &hints, &list);
  if (*gai_err) return -1;
  int fd = -1;
  for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      int e = errno;
      close(fd);
      fd = -1;
      errno = e;
    }
  }
  freeaddrinfo(list);
  return fd;
}
