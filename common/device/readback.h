/**
 * @file
 * @brief Reading device values back without stalling the device (the analogue of PyTorch's
 * `loss.to("cpu", non_blocking=True)` plus an event): the copy is queued on the stream, and the
 * host takes the value later, once it has arrived.
 *
 * A training loop that reads its loss with dev_download() every step waits for the GPU to finish
 * that step before it can queue the next one, so the GPU idles while the host launches work. With a
 * Readback the loop queues the read and goes on; it takes each value when it is there, and waits
 * only when it has run too far ahead. On the CPU, where work is synchronous, a value has arrived as
 * soon as it is queued, so nothing changes there.
 */
#ifndef DDP_READBACK_H
#define DDP_READBACK_H

#include <stdbool.h>

#include "device.h"
#include "devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Values a Readback holds in flight at most. */
#define READBACK_SLOTS 4

/** @brief A queue of device floats on their way to the host, oldest first. */
typedef struct Readback {
  float *host;                       ///< dev_host_alloc() (pinned on CUDA): READBACK_SLOTS values
  DevEvent arrived[READBACK_SLOTS];  ///< recorded after each slot's copy
  long long tag[READBACK_SLOTS];     ///< the caller's label of each value (e.g. its step)
  int head;                          ///< slot of the oldest value not yet taken
  int count;                         ///< values queued and not yet taken
} Readback;

/**
 * @brief Creates an empty queue on the context's device.
 * @param[out] r the queue.
 * @param[in]  c the context whose stream will produce the values.
 */
void readback_init(Readback *r, const Ctx *c);

/**
 * @brief Releases the queue. Values not taken are dropped, after their copies have landed (it waits
 * for them: the copies write into the memory it frees).
 * @param[in,out] r the queue.
 * @param[in]     c its context.
 */
void readback_free(Readback *r, const Ctx *c);

/**
 * @brief Queues a copy of one device float, after the work queued so far on the context's stream.
 * The device value may be overwritten by work queued after this call. Ends the job when
 * READBACK_SLOTS values are already in flight (take them first).
 * @param[in,out] r   the queue.
 * @param[in]     c   the context whose stream produces the value.
 * @param[in]     src device pointer to the float.
 * @param[in]     tag the caller's label, handed back with the value.
 */
void readback_push(Readback *r, const Ctx *c, const float *src, long long tag);

/**
 * @brief Takes the oldest queued value if it has arrived, or waits for it when more than
 * @p max_ahead values are queued. Call it in a loop until it returns false.
 * @param[in,out] r         the queue.
 * @param[in]     c         its context.
 * @param[in]     max_ahead how many values may stay in flight: 0 waits for all of them.
 * @param[out]    value     the value, when one is taken.
 * @param[out]    tag       its label, when one is taken.
 * @return true when a value was taken, false when none has arrived and at most @p max_ahead are
 *         queued (nothing was waited for).
 */
bool readback_take(Readback *r, const Ctx *c, int max_ahead, float *value, long long *tag);

#ifdef __cplusplus
}
#endif
#endif
