/**
 * @file
 * @brief One TCP connect to a host by name: every address it resolves to, in turn (the rendezvous
 * store's clients and the lighthouse's retry it with back-off).
 */
#ifndef DDP_TCP_H
#define DDP_TCP_H

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Connects a stream socket to @p host:@p port, trying each address getaddrinfo gives.
 * @param[in]  host    host name or numeric address (without brackets).
 * @param[in]  port    the port, as text.
 * @param[out] gai_err getaddrinfo's status (0 when the name resolved).
 * @return the connected socket, or -1 with errno set (or @p gai_err non-zero).
 */
int tcp_connect(const char *host, const char *port, int *gai_err);

#ifdef __cplusplus
}
#endif
#endif
