/**
 * @file
 * @brief A small key-value store over TCP for the rendezvous of an environment launch (the analogue
 * of PyTorch's TCPStore): rank 0 serves it, every rank (rank 0 too) is a client. Under live recovery
 * (step 09) the lighthouse serves it instead (store_server_start()), and the ranks only connect.
 *
 * Keys are write-once (as Gloo's stores expect: setting a key twice ends the job) and a get blocks
 * until the key is there, for at most the store's timeout. The caller prefixes its keys per attempt
 * (dist_gloo.cc: `attempt_<TORCHELASTIC_RESTART_COUNT>/`), so that a restarted job never meets the
 * keys of the previous one.
 *
 * Wire format, one request at a time per connection, integers as 4 bytes in network order:
 * - set: `'S' keylen key vallen val` → `'+'`; `'!'` when the key exists; `'F'`, and the connection
 *   closed, when it is beyond the caps below.
 * - get: `'G' keylen key timeout_ms` → `'+' vallen val`; `'-'` when the key did not appear within
 *   timeout_ms; `'X' len reason` once the job is aborted; `'E'` when the server stops while the get
 *   waits (the job it serves has finished: the client is another job's).
 * - abort: `'A' len reason` → `'+'`.
 * - hello (a rank's first request on a connection): `'H' 0` → `'+'`; `'B' len reason`, and the
 *   connection closed, when the server turned the connection away (every slot held, see below): the
 *   rank retries until its timeout, then ends saying so, and rank 0 warns once and names it when a
 *   get of its times out.
 *
 * The server (rank 0) listens on the address MASTER_ADDR resolves to when it is this machine's (all
 * addresses otherwise: see store_init()), serves each connection on a thread of its own and frees
 * both when the client closes, and bounds what clients may hold: at most 1024 connections open at
 * once (at most half the process's descriptor limit, at least every rank plus 8; more are closed at
 * once, and told why), 16 keys and 4 KiB + 256 bytes per rank of keys and values per connection, and
 * world_size + 16 connections' worth in all. There is no authentication (as PyTorch's TCPStore): any
 * program that reaches the port can set keys or abort the job, so run jobs on a trusted network.
 *
 * Failures end the job with a one-line reason naming the rank, the store's address and the key: a
 * port rank 0 cannot listen on, a server that does not answer within the timeout (clients retry the
 * connect with back-off until then), a key that never appears, a set beyond the caps, a rank started
 * with other settings than rank 0 (store_agree()), a store that stops while a rank waits on it
 * (another job's, on the same port).
 */
#ifndef DDP_STORE_H
#define DDP_STORE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief A connection to the store (and, on rank 0, the server). */
typedef struct Store Store;

/**
 * @brief Joins the store at @p host:@p port. Rank 0 first starts serving on @p port: on the address
 * @p host resolves to when it is one of this machine's (127.0.0.1, a node's own address, localhost),
 * else on all addresses (a host name that resolves to a loopback address here, as Debian's
 * 127.0.1.1, since other nodes reach it through another one; an address behind NAT). Every rank then
 * connects, retrying with back-off until @p timeout_s has passed.
 * @param[in] host      rank 0's host name or address (MASTER_ADDR; an IPv6 literal in brackets or not).
 * @param[in] port      the store's TCP port.
 * @param[in] rank      this process's rank.
 * @param[in] world_size number of ranks: who store_free() waits for, and (rank 0's) the server's caps.
 * @param[in] timeout_s longest wait of any call, seconds (> 0).
 * @return the store, never NULL.
 */
Store *store_init(const char *host, int port, int rank, int world_size, double timeout_s);

/**
 * @brief Joins a store that another process serves (the lighthouse's, tools/lighthouse.c), as a client
 * only: store_init() without the server, whatever @p rank is. Leave with store_close().
 * @param[in] host       the server's host name or address.
 * @param[in] port       its TCP port.
 * @param[in] rank       this process's rank (named in messages; store_agree() compares with rank 0's).
 * @param[in] world_size number of ranks meeting there.
 * @param[in] timeout_s  longest wait of any call, seconds (> 0).
 * @return the store, never NULL.
 */
Store *store_connect(const char *host, int port, int rank, int world_size, double timeout_s);

/**
 * @brief Closes a store_connect() client's connection, without store_free()'s barrier (the server
 * outlives every client).
 * @param[in] s the store (freed).
 */
void store_close(Store *s);

/**
 * @brief Sets @p key to @p n bytes at @p value. Ends the job when the key is already set.
 * @param[in] s     the store.
 * @param[in] key   NUL-terminated key.
 * @param[in] value host, (n) bytes.
 * @param[in] n     size of the value.
 */
void store_set(Store *s, const char *key, const void *value, size_t n);

/**
 * @brief The value of @p key, waiting up to @p timeout_s for it to be set. Ends the job when it
 * does not appear in time.
 * @param[in] s         the store.
 * @param[in] key       NUL-terminated key.
 * @param[in] timeout_s longest wait, seconds (> 0).
 * @param[out] n        size of the value.
 * @return the value: host, (*n) bytes (plus a NUL), malloc'd; the caller frees it.
 */
void *store_get(Store *s, const char *key, double timeout_s, size_t *n);

/**
 * @brief Aborts the job through the store: every get on the server, waiting or to come (rank 0's
 * too), ends its rank with @p reason. Best effort: the caller ends its own rank next.
 * @param[in] s      the store.
 * @param[in] reason one line, NUL-terminated (at most 4096 bytes are sent).
 */
void store_abort(Store *s, const char *reason);

/**
 * @brief Checks that every rank was started with rank 0's value of the setting @p name: rank 0 sets
 * the key `agree/<name>`, every other rank reads it. A rank that differs aborts the job
 * (store_abort()) and ends, both with `rank R was started with NAME=VALUE, rank 0 with NAME=VALUE:
 * HINT`. Call it before any key that depends on the setting.
 * @param[in] s     the store.
 * @param[in] name  the setting, as the user knows it (an environment variable's name).
 * @param[in] value this rank's value, as text.
 * @param[in] hint  what to do about a difference.
 */
void store_agree(Store *s, const char *name, const char *value, const char *hint);

/**
 * @brief The local address of this rank's connection to the store: the address of the interface
 * that reaches rank 0 (127.0.0.1 when MASTER_ADDR is 127.0.0.1), as text.
 * @param[in] s the store.
 * @return a NUL-terminated numeric address, owned by @p s.
 */
const char *store_local_address(const Store *s);

/** @brief A store's server alone, in a process that is no rank (the lighthouse, tools/lighthouse.c). */
typedef struct StoreServer StoreServer;

/**
 * @brief Starts serving the store on @p port (threads of its own), at @p host as store_init()'s rank
 * 0 does, or on every address when @p host is NULL or "". Ends the process when it cannot listen.
 * @param[in] host    the address to serve on (NULL or "": all).
 * @param[in] port    the store's TCP port.
 * @param[in] clients the most clients meeting at once (a quorum's ranks): sizes the caps, as
 *                    store_init()'s world_size does.
 * @return the server, never NULL.
 */
StoreServer *store_server_start(const char *host, int port, int clients);

/**
 * @brief Deletes every key that starts with @p prefix, giving its bytes back to the store's total:
 * the lighthouse drops a finished quorum's keys (`q<id>/`), so that many quorums never fill the caps.
 * A get still waiting for such a key goes on waiting, as for a key never set.
 * @param[in] sv     the server.
 * @param[in] prefix NUL-terminated prefix.
 */
void store_server_drop_prefix(StoreServer *sv, const char *prefix);

/**
 * @brief Stops the server: gets still waiting answer 'E', open connections are closed, and its
 * memory is freed.
 * @param[in] sv the server (freed).
 */
void store_server_stop(StoreServer *sv);

/**
 * @brief Leaves the store: a final barrier (every rank but 0 sets `done/<rank>` under @p prefix;
 * rank 0 waits for all of them, so that no rank still reading keys loses the server), then rank 0
 * stops the server. Every rank calls it once, after its last get.
 * @param[in] s      the store (freed).
 * @param[in] prefix prefix of the barrier's keys (the attempt's prefix).
 */
void store_free(Store *s, const char *prefix);

#ifdef __cplusplus
}
#endif
#endif
