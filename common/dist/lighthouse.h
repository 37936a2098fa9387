/**
 * @file
 * @brief A trainer's connection to the lighthouse (tools/lighthouse.c, `build/bin/lighthouse`): the one
 * coordinator of live recovery (step 09), a process of its own, never a trainer, so that no rank's
 * death takes the coordinator with it (torchft's lighthouse; ray-project/ray#60820 is what happens when
 * the store lives in rank 0).
 *
 * A replica (one trainer process, named by its replica id, the slot scripts/launch.sh --ft gave it) is
 * a member while its connection is open and its heartbeat is fresh: a thread of this client sends one
 * every heartbeat interval, also while the trainer is blocked in a collective. A replica that dies
 * closes its connection (the lighthouse sees it at once); one that freezes (SIGSTOP, a paused machine)
 * stops beating and is dropped after the lighthouse's `--heartbeat_timeout`.
 *
 * When a replica needs a process group (at start-up, and after a collective failed) it asks for a
 * quorum, reporting its committed step and its parameter digest; the lighthouse answers every member
 * of the new quorum together, by torchft's rules (`tools/lighthouse.c`): the quorum's id, the world size
 * and this replica's rank in it (the members in replica-id order), the newest step among them, the rank
 * to heal from, and the store (the lighthouse's own key-value server, store.h) under whose prefix
 * `q<id>/` the new group meets.
 *
 * Wire format: text lines over TCP (one request, one answer; heartbeats are not answered):
 * - `hello REPLICA INCARNATION` → `ok STORE_PORT` | `refused REASON`
 * - `beat`
 * - `quorum STEP DIGEST` (DIGEST: 16 hex digits) →
 *   `quorum ID WORLD RANK MAX_STEP SOURCE HEAL R0,R1,...` | `refused REASON`
 * - the lighthouse to the members of the last quorum, unasked: `join R` when replica R (a new one)
 *   asks to join; they then ask for the next quorum together, at the same step boundary.
 */
#ifndef DDP_LIGHTHOUSE_H
#define DDP_LIGHTHOUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LIGHTHOUSE_MAX_REPLICAS 1024  ///< the most members a quorum can have

/** @brief A connection to the lighthouse and its heartbeat thread. */
typedef struct Lighthouse Lighthouse;

/** @brief One quorum, as the lighthouse issued it to this replica. */
typedef struct Quorum {
  int id;              ///< the quorum's number: 1, 2, ... (its group's keys are under `q<id>/`)
  int world_size;      ///< members
  int rank;            ///< this replica's rank among them (replica-id order)
  long long max_step;  ///< the newest committed step among the members
  int source;          ///< the rank of the first member at max_step: the others heal from it
  bool heal;           ///< some member is behind max_step (it must heal from @ref source)
  int replicas[LIGHTHOUSE_MAX_REPLICAS];  ///< (world_size) the members' replica ids, by rank
  char store_host[256];                   ///< the store of the quorum's rendezvous: the lighthouse's host
  int store_port;                         ///< and its store's port
} Quorum;

/**
 * @brief Joins the lighthouse at @p address ("host:port", as `DDP_LIGHTHOUSE` says it) as replica
 * @p replica, retrying the connect with back-off for up to @p timeout_s, and starts the heartbeat
 * thread (one `beat` every @p heartbeat_s). Ends the process with a one-line reason when the
 * lighthouse cannot be reached or refuses the replica (another live member holds its id).
 * @param[in] address     "host:port" (an IPv6 literal in brackets).
 * @param[in] replica     this process's replica id (>= 0).
 * @param[in] incarnation how many times this replica id was started before (0 the first time).
 * @param[in] heartbeat_s seconds between heartbeats (> 0).
 * @param[in] timeout_s   longest wait to connect, seconds (> 0).
 * @return the connection, never NULL.
 */
Lighthouse *lighthouse_join(const char *address, int replica, int incarnation, double heartbeat_s,
                            double timeout_s);

/**
 * @brief Asks for a quorum, reporting this replica's committed @p step and parameter @p digest, and
 * waits up to @p timeout_s for the lighthouse's answer.
 * @param[in]  lh        the connection.
 * @param[in]  step      optimizer steps this replica has committed.
 * @param[in]  digest    its parameters' digest (mlp_param_digest()).
 * @param[in]  timeout_s longest wait, seconds (> 0).
 * @param[out] q         the quorum, when it returns 0.
 * @param[out] why       the lighthouse's reason, when it returns 1 (NUL-terminated).
 * @param[in]  why_size  size of @p why.
 * @return 0: a quorum; 1: refused (@p why says why: too few replicas, a late member of an old quorum,
 *         members whose parameters disagree); 2: no answer within @p timeout_s, or the lighthouse's
 *         connection broke (@p why says which).
 */
int lighthouse_quorum(Lighthouse *lh, long long step, uint64_t digest, double timeout_s, Quorum *q, char *why,
                      size_t why_size);

/**
 * @brief Whether the lighthouse said that a replica waits to join (a `join` line came since the last
 * quorum). Never blocks: it reads only what has arrived.
 * @param[in] lh the connection.
 * @return true once such a line came, until the next lighthouse_quorum().
 */
bool lighthouse_join_waiting(Lighthouse *lh);

/**
 * @brief Leaves: stops the heartbeat thread and closes the connection (the lighthouse forgets the
 * member at once).
 * @param[in] lh the connection (freed).
 */
void lighthouse_leave(Lighthouse *lh);

#ifdef __cplusplus
}
#endif
#endif
