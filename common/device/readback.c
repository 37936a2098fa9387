// readback.c: the ring of pinned slots and events of readback.h.
#include "readback.h"

#include <string.h>

#include "check.h"
#include "devmem.h"

void readback_init(Readback *r, const Ctx *c) {
  memset(r, 0, sizeof *r);
  r->host = dev_host_alloc(c, READBACK_SLOTS * sizeof(float));
  for (int i = 0; i < READBACK_SLOTS; i++) dev_event_init(c, &r->arrived[i]);
}

void readback_free(Readback *r, const Ctx *c) {
  for (int k = 0; k < r->count; k++)  // copies still in flight write into r->host: let them land
    dev_event_wait(c, &r->arrived[(r->head + k) % READBACK_SLOTS]);
  for (int i = READBACK_SLOTS - 1; i >= 0; i--) dev_event_free(c, &r->arrived[i]);
  dev_host_free(c, r->host);
  memset(r, 0, sizeof *r);
}

void readback_push(Readback *r, const Ctx *c, const float *src, long long tag) {
  if (r->count == READBACK_SLOTS)
    die(1, "readback_push: %d values already in flight (take some first)", READBACK_SLOTS);
  int slot = (r->head + r->count) % READBACK_SLOTS;
  dev_download_async(c, &r->host[slot], src, sizeof(float));
  dev_event_record(c, &r->arrived[slot], NULL);
  r->tag[slot] = tag;
  r->count++;
}

bool readback_take(Readback *r, const Ctx *c, int max_ahead, float *value, long long *tag) {
  if (r->count == 0) return false;
  const DevEvent *oldest = &r->arrived[r->head];
  if (r->count > max_ahead) {
    dev_event_wait(c, oldest);  // too far ahead: wait for the device
  } else if (!dev_event_done(c, oldest)) {
    return false;
  }
  *value = r->host[r->head];
  *tag = r->tag[r->head];
  r->head = (r->head + 1) % READBACK_SLOTS;
  r->count--;
  return true;
}
