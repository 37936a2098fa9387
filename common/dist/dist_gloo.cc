// dist_gloo.cc: the Gloo backend, the one C++ file of common/ (Gloo's API is C++). Its entry point is
// the C function dist_gloo_ops() (dist_backend.h), the table of its operations that dist.c calls
// through (at the end); no exception leaves this file or its thread: every Gloo call
// runs inside a try block, and its error ends the job through check.h, naming the rank, the call and
// Gloo's reason.
//
// Design (PyTorch's ProcessGroupGloo, cut down to one thread): Gloo's collectives block, so they run
// on one worker thread fed by a FIFO queue (a mutex and two condition variables). A collective is
// queued with a tag taken on the calling thread, tag = counter++, so that the tags follow the issue
// order, which is the same on every rank; one thread runs them in that order. dist_test() reads the
// job's atomic completion flag; dist_wait() waits for it, under the watchdog. Blocking collectives
// are queued and waited for at once, so that the main thread never calls Gloo itself. Device buffers
// are staged through pinned host memory, at once, as dist_mpi.c does.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <netinet/in.h>
#include <unistd.h>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "check.h"
#include "devmem.h"
#include "dist_backend.h"
#include "half.h"
#include "store.h"
#include "watchdog.h"

namespace {

// ---- the rendezvous store, as Gloo's Store ----------------------------------------------------------

// Gloo's store interface over store.h. get blocks (connectFullMesh reads keys without waiting for
// them first); store.h ends the job itself on a timeout or a key set twice.
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(::Store *s, double timeout_s) : s_(s), timeout_s_(timeout_s) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    store_set(s_, key.c_str(), data.data(), data.size());
  }

  std::vector<char> get(const std::string &key) override { return get(key, timeout_s_); }

  void wait(const std::vector<std::string> &keys) override { wait(keys, kDefaultTimeout); }

  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
    // The longer of Gloo's and ours: Gloo passes its 30 s default, --timeout may be longer.
    double t = std::max(timeout_s_, (double)timeout.count() / 1000.0);
    for (const auto &key : keys) get(key, t);
  }

 private:
  std::vector<char> get(const std::string &key, double timeout_s) {
    size_t n = 0;
    char *value = static_cast<char *>(store_get(s_, key.c_str(), timeout_s, &n));
    std::vector<char> out(value, value + n);
    free(value);
    return out;
  }

  ::Store *s_;
  double timeout_s_;
};

// This attempt's number: TORCHELASTIC_RESTART_COUNT (torchrun, scripts/restart.sh), 0 when unset.
std::string attempt() {
  const char *n = getenv("TORCHELASTIC_RESTART_COUNT");
  return n && *n ? n : "0";
}

// The keys of this attempt: a job that torchrun restarts (TORCHELASTIC_RESTART_COUNT) never meets
// the write-once keys of the attempt before.
std::string attempt_prefix() { return "attempt_" + attempt(); }

// Every rank must have rank 0's world size and attempt before Gloo's keys are exchanged: with another
// world size Gloo's addresses do not parse (its enforce fails), with another attempt the ranks wait
// on each other's keys until the timeout. Either difference ends every rank with a line naming it.
void agree_on_launch(::Store *s, const ProcessGroup *pg) {
  store_agree(s, pg->launcher == LAUNCH_SLURM ? "SLURM_NTASKS" : "WORLD_SIZE",
              std::to_string(pg->world_size).c_str(), "start every rank with the same number of ranks");
  store_agree(s, "TORCHELASTIC_RESTART_COUNT", attempt().c_str(),
              "a rank restarted on its own does not rejoin the others' attempt: restart every rank "
              "together (torchrun --max_restarts, scripts/launch.sh --max_restarts)");
}

// ---- jobs and the worker ----------------------------------------------------------------------------

enum class Kind { AllReduce, ReduceScatter, Broadcast, AllGather, Barrier };

// One collective queued on the worker (a DistWork's, or a blocking call's on the caller's stack).
struct Job {
  Kind kind = Kind::Barrier;
  const char *what = "";       // Gloo's call, for error messages
  void *buf = nullptr;         // host: written (all-reduce: in place; reduce-scatter: the chunk)
  const void *send = nullptr;  // host: all-gather's input, reduce-scatter's send buffer
  size_t n = 0;                // elements of buf (all-gather: per rank)
  size_t total = 0;            // reduce-scatter: elements of send
  size_t offset = 0;           // reduce-scatter: where this rank's chunk starts in send
  DistType type = DIST_FLOAT;
  DistOp op = DIST_SUM;
  int root = 0;
  uint32_t tag = 0;
  std::atomic<bool> done{false};  // set by the worker when the job has run (or failed)
  std::string error;              // empty when it succeeded; read after done
};

struct Gloo {
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::chrono::milliseconds timeout{0};
  std::thread worker;
  std::mutex lock;                   // guards queue, stop, failed
  std::condition_variable queued;    // a job was queued, or stop
  std::condition_variable finished;  // a job is done
  std::deque<Job *> queue;
  bool stop = false;
  std::string failed;     // the first error: later jobs are not run (the pairs are broken)
  uint32_t next_tag = 0;  // taken on the calling thread, in issue order
  int world_size = 1;
  bool recoverable = false;  // a failure marks the group failed (failed) instead of ending the job
};

Gloo *state(ProcessGroup *pg) { return static_cast<Gloo *>(pg->gloo); }

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

// The 16-bit floats' sums: each pair added in float32, rounded once (half.h), as NCCL's.
void half_sum(void *c, const void *a, const void *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    static_cast<uint16_t *>(c)[i] =
        half_add(static_cast<const uint16_t *>(a)[i], static_cast<const uint16_t *>(b)[i]);
}

void bf16_sum(void *c, const void *a, const void *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    static_cast<uint16_t *>(c)[i] =
        bf16_add(static_cast<const uint16_t *>(a)[i], static_cast<const uint16_t *>(b)[i]);
}

ReduceFn sum_of(DistType t) {
  if (t == DIST_HALF) return &half_sum;
  if (t == DIST_BF16) return &bf16_sum;
  if (t == DIST_DOUBLE) return static_cast<ReduceFn>(&gloo::sum<double>);
  if (t == DIST_INT) return static_cast<ReduceFn>(&gloo::sum<int>);
  return static_cast<ReduceFn>(&gloo::sum<float>);
}

// Gloo has no average: every rank scales the same sum by 1/W, so the replicas stay bit-identical.
void scale_avg(float *f, size_t n, int world_size) {
  float inv = 1.0f / (float)world_size;
  for (size_t i = 0; i < n; i++) f[i] *= inv;
}

template <typename T>
void all_reduce_as(Gloo &g, const Job &j, void *buf, size_t n) {
  gloo::AllreduceOptions o(g.context);
  o.setOutput(static_cast<T *>(buf), n);
  o.setReduceFunction(sum_of(j.type));
  o.setTag(j.tag);
  o.setTimeout(g.timeout);
  gloo::allreduce(o);
}

void all_reduce(Gloo &g, const Job &j, void *buf, size_t n) {
  if (j.type == DIST_DOUBLE) {
    all_reduce_as<double>(g, j, buf, n);
  } else if (j.type == DIST_INT) {
    all_reduce_as<int>(g, j, buf, n);
  } else if (j.type == DIST_HALF || j.type == DIST_BF16) {
    all_reduce_as<uint16_t>(g, j, buf, n);
  } else {
    all_reduce_as<float>(g, j, buf, n);
  }
}

// Gloo's options take typed pointers; bytes carry every DistType.
void broadcast(Gloo &g, const Job &j) {
  gloo::BroadcastOptions o(g.context);
  o.setOutput(static_cast<char *>(j.buf), j.n * dist_type_size(j.type));
  o.setRoot(j.root);
  o.setTag(j.tag);
  o.setTimeout(g.timeout);
  gloo::broadcast(o);
}

void all_gather(Gloo &g, const Job &j) {
  size_t bytes = j.n * dist_type_size(j.type);
  char *out = static_cast<char *>(j.buf);
  gloo::AllgatherOptions o(g.context);
  // In place (send is out + rank·bytes) without an input, as Gloo's own in-place form.
  if (j.send != out + (size_t)g.context->rank * bytes)
    o.setInput(const_cast<char *>(static_cast<const char *>(j.send)), bytes);
  o.setOutput(out, bytes * (size_t)g.world_size);
  o.setTag(j.tag);
  o.setTimeout(g.timeout);
  gloo::allgather(o);
}

void barrier(Gloo &g, const Job &j) {
  gloo::BarrierOptions o(g.context);
  o.setTag(j.tag);
  o.setTimeout(g.timeout);
  gloo::barrier(o);
}

// Runs one job on the worker thread; Gloo's exceptions become the job's error.
void execute(Gloo &g, Job &j) {
  try {
    size_t size = dist_type_size(j.type);
    switch (j.kind) {
      case Kind::AllReduce:
        all_reduce(g, j, j.buf, j.n);
        if (j.op == DIST_AVG) scale_avg(static_cast<float *>(j.buf), j.n, g.world_size);
        break;
      case Kind::ReduceScatter: {  // all-reduce the whole buffer, keep this rank's chunk
        char *mine = static_cast<char *>(const_cast<void *>(j.send)) + j.offset * size;
        all_reduce(g, j, const_cast<void *>(j.send), j.total);
        if (mine != j.buf) memmove(j.buf, mine, j.n * size);
        if (j.op == DIST_AVG) scale_avg(static_cast<float *>(j.buf), j.n, g.world_size);
        break;
      }
      case Kind::Broadcast:
        broadcast(g, j);
        break;
      case Kind::AllGather:
        all_gather(g, j);
        break;
      case Kind::Barrier:
        barrier(g, j);
        break;
    }
  } catch (const gloo::IoException &e) {
    j.error = std::string(j.what) + ": " + e.what() + " (a peer died, froze or left)";
  } catch (const std::exception &e) {
    j.error = std::string(j.what) + ": " + e.what();
  } catch (...) {
    j.error = std::string(j.what) + ": unknown exception";
  }
}

void work_loop(Gloo *g) {
  for (;;) {
    std::unique_lock<std::mutex> held(g->lock);
    g->queued.wait(held, [g] { return g->stop || !g->queue.empty(); });
    if (g->queue.empty()) return;  // stop, and nothing left to run
    Job *j = g->queue.front();
    g->queue.pop_front();
    bool broken = !g->failed.empty();
    held.unlock();
    if (broken) {
      j->error = std::string(j->what) + ": not run, an earlier collective failed";
    } else {
      execute(*g, *j);
    }
    held.lock();
    if (!j->error.empty() && g->failed.empty()) g->failed = j->error;
    j->done.store(true, std::memory_order_release);
    g->finished.notify_all();
  }
}

// Queues @p j with the next tag.
void enqueue(Gloo &g, Job &j) {
  std::lock_guard<std::mutex> held(g.lock);
  j.tag = g.next_tag++;
  j.done.store(false, std::memory_order_relaxed);
  j.error.clear();
  g.queue.push_back(&j);
  g.queued.notify_one();
}

// The job's error, as the project's message-then-abort.
[[noreturn]] void fail(const Job &j) { check_fail("GLOO", __FILE__, __LINE__, "%s", j.error.c_str()); }

// Waits for @p j under the watchdog; ends the job when it failed (a recoverable group: the worker has
// recorded the failure, which dist_failure() reports; the job's results are undefined).
void wait_job(Gloo &g, Job &j) {
  if (!j.done.load(std::memory_order_acquire)) {
    watchdog_enter("a Gloo collective");
    std::unique_lock<std::mutex> held(g.lock);
    g.finished.wait(held, [&j] { return j.done.load(std::memory_order_acquire); });
    held.unlock();
    watchdog_leave();
  }
  if (!j.error.empty() && !g.recoverable) fail(j);
}

void run_blocking(Gloo &g, Job &j) {
  enqueue(g, j);
  wait_job(g, j);
}

// ---- device buffers ---------------------------------------------------------------------------------

// A blocking all-reduce of @p n elements at @p host, host memory (no staging).
void all_reduce_host(ProcessGroup *pg, void *host, size_t n, DistType type, DistOp op) {
  Job j;
  j.kind = Kind::AllReduce;
  j.what = "gloo::allreduce";
  j.n = n;
  j.type = type;
  j.op = op;
  j.buf = host;
  run_blocking(*state(pg), j);
}

// A blocking all-reduce of @p n elements at @p buf (host, or device staged through the host).
void all_reduce_blocking(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  if (!dist_on_gpu(pg)) {
    all_reduce_host(pg, buf, n, type, op);
    return;
  }
  size_t bytes = n * dist_type_size(type);
  void *host = dist_staging(pg, bytes);
  dev_download(pg->ctx, host, buf, bytes);  // synchronous: the stream's earlier work has read the stage
  all_reduce_host(pg, host, n, type, op);
  dev_upload(pg->ctx, buf, host, bytes);
}

// ---- start-up -----------------------------------------------------------------------------------------

// Every failure ends this process at once (`_exit`: no static destructor runs under Gloo's threads);
// the launcher then ends the others (torchrun and scripts/launch.sh do; dist.h), and a peer whose
// pair closes gets Gloo's "Connection reset by peer" at once.
void gloo_abort(int status) {
  fflush(nullptr);
  _exit(status ? status : 1);
}

// Seconds a collective may wait: a recoverable group's operation timeout, else --timeout's.
double op_timeout(const ProcessGroup *pg) { return pg->recoverable ? pg->op_timeout : pg->timeout; }

std::shared_ptr<gloo::rendezvous::Context> connect_mesh(ProcessGroup *pg, ::Store *s,
                                                        const std::string &prefix, double wait_s) {
  try {
    gloo::transport::tcp::attr attr;
    const char *ifname = getenv("GLOO_SOCKET_IFNAME");
    if (ifname && *ifname) {
      attr.iface = ifname;
    } else {
      attr.hostname = store_local_address(s);  // never gethostname(): it may name 127.0.1.1
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    RendezvousStore base(s, wait_s);
    gloo::rendezvous::PrefixStore store(prefix, base);
    auto context = std::make_shared<gloo::rendezvous::Context>(pg->rank, pg->world_size);
    context->setTimeout(std::chrono::milliseconds((long long)(op_timeout(pg) * 1000.0)));
    context->connectFullMesh(store, device);
    return context;
  } catch (const std::exception &e) {
    check_fail("GLOO", __FILE__, __LINE__, "connectFullMesh (GLOO_SOCKET_IFNAME=%s): %s",
               getenv("GLOO_SOCKET_IFNAME") ? getenv("GLOO_SOCKET_IFNAME") : "unset", e.what());
  }
}

// An exception that leaves one of Gloo's own threads (its TCP transport's loop, which this file cannot
// wrap: e.g. "op.preamble.length <= op.nbytes" when a peer sends a message of another size) reaches
// std::terminate: say what it was, as every other Gloo failure is said, and end the job through
// check.h (the flight recorder's ring is written, the abort hook ends the rank), instead of abort()
// with only the C++ runtime's line.
[[noreturn]] void on_terminate() {
  std::string what = "an unknown exception";
  try {
    if (std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    what = "std::terminate without an exception";
  } catch (const std::exception &e) {
    what = e.what();
  } catch (...) {
  }
  check_fail(
      "GLOO", __FILE__, __LINE__,
      "an exception in one of Gloo's threads: %s (a peer sent what this rank did not expect: the ranks "
      "called collectives of other sizes or kinds, or a peer failed)",
      what.c_str());
}

// ---- dist.c's entry points (the table at the end) ---------------------------------------------------

// The group's state around its connected @p context, and the worker thread that runs its collectives.
void start_worker(ProcessGroup *pg, std::shared_ptr<gloo::rendezvous::Context> context) {
  Gloo *g = new Gloo;
  g->context = std::move(context);
  g->timeout = std::chrono::milliseconds((long long)(op_timeout(pg) * 1000.0));
  g->world_size = pg->world_size;
  g->recoverable = pg->recoverable;
  try {
    g->worker = std::thread(work_loop, g);
  } catch (const std::exception &e) {
    check_fail("GLOO", __FILE__, __LINE__, "cannot start the worker thread: %s", e.what());
  }
  pg->gloo = g;
}

// Lets the worker run what is queued (a failed group: drained without running), joins it, and destroys
// the context: its pairs close, so a peer still waiting on this rank fails at once.
void stop_worker(ProcessGroup *pg) {
  Gloo *g = state(pg);
  {
    std::lock_guard<std::mutex> held(g->lock);
    g->stop = true;
    g->queued.notify_one();
  }
  g->worker.join();  // it runs what is queued first; before the context goes
  delete g;
  pg->gloo = nullptr;
}

// Joins the group: the rendezvous through the store (store.h) that rank 0 serves at host:port, Gloo's
// full mesh of TCP pairs, then the worker thread that runs the collectives. Registers the abort hook
// (`_exit`, when MPI is not up). Covered by the watchdog.
void connect_at(ProcessGroup *pg, const char *host, int port) {
  if (!pg->mpi_up) check_set_abort(gloo_abort);
  std::set_terminate(on_terminate);
  // A write to a pair whose peer has died must fail with EPIPE (an IoException, reported), not kill
  // this process with SIGPIPE and no message.
  signal(SIGPIPE, SIG_IGN);
  watchdog_enter("the Gloo rendezvous (every rank must join)");
  ::Store *s = store_init(host, port, pg->rank, pg->world_size, pg->timeout);
  agree_on_launch(s, pg);
  std::string prefix = attempt_prefix();
  auto context = connect_mesh(pg, s, prefix, pg->timeout);
  store_free(s, (prefix + "/").c_str());
  watchdog_leave();
  start_worker(pg, context);
}

void gloo_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  all_reduce_blocking(pg, buf, n, type, op);
}

void gloo_work_init(ProcessGroup *, DistWork *w) { w->job = new Job; }

void gloo_work_free(ProcessGroup *, DistWork *w) {
  delete static_cast<Job *>(w->job);
  w->job = nullptr;
}

void gloo_all_reduce_start(ProcessGroup *pg, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  if (dist_on_gpu(pg)) {  // staged through the host: nothing to overlap, reduce now
    all_reduce_blocking(pg, w->buf, w->n, w->type, w->op);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
    return;
  }
  Job &j = *static_cast<Job *>(w->job);
  j.kind = Kind::AllReduce;
  j.what = "gloo::allreduce";
  j.buf = w->buf;
  j.n = w->n;
  j.type = w->type;
  j.op = w->op;
  enqueue(*state(pg), j);
}

void gloo_reduce_scatter_start(ProcessGroup *pg, void *send, const size_t *counts, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  size_t size = dist_type_size(w->type), total = dist_chunk_offset(counts, pg->world_size);
  size_t offset = dist_chunk_offset(counts, pg->rank);
  if (dist_on_gpu(pg)) {  // [send] through the host, reduced now; this rank's chunk goes back up
    char *host = static_cast<char *>(dist_staging(pg, total * size));
    dev_download(pg->ctx, host, send, total * size);  // synchronous
    // Already on the host: reduced there (not all_reduce_blocking, which would stage the stage again,
    // copying it onto itself, and queue a copy that races the scaling below)
    all_reduce_host(pg, host, total, w->type, DIST_SUM);
    if (w->op == DIST_AVG) scale_avg(reinterpret_cast<float *>(host + offset * size), w->n, pg->world_size);
    dev_upload(pg->ctx, w->buf, host + offset * size, w->n * size);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
    return;
  }
  Job &j = *static_cast<Job *>(w->job);
  j.kind = Kind::ReduceScatter;
  j.what = "gloo::allreduce (for a reduce-scatter)";
  j.buf = w->buf;
  j.send = send;
  j.n = w->n;
  j.total = total;
  j.offset = offset;
  j.type = w->type;
  j.op = w->op;
  enqueue(*state(pg), j);
}

bool gloo_test(ProcessGroup *pg, DistWork *w) {
  Job &j = *static_cast<Job *>(w->job);
  if (!j.done.load(std::memory_order_acquire)) return false;
  if (!j.error.empty() && !state(pg)->recoverable) fail(j);
  dev_event_record(pg->ctx, &w->end, NULL);
  w->done = true;
  return true;
}

void gloo_wait(ProcessGroup *pg, DistWork *w) {
  wait_job(*state(pg), *static_cast<Job *>(w->job));
  dev_event_record(pg->ctx, &w->end, NULL);
  w->done = true;
}

void gloo_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  size_t bytes = n * dist_type_size(type);
  Job j;
  j.kind = Kind::Broadcast;
  j.what = "gloo::broadcast";
  j.n = n;
  j.type = type;
  j.root = root;
  j.buf = dist_on_gpu(pg) ? dist_staging(pg, bytes) : buf;
  if (dist_on_gpu(pg)) {
    dev_sync(pg->ctx);  // Gloo writes the staging buffer: no queued upload may still read it
    if (pg->rank == root) dev_download(pg->ctx, j.buf, buf, bytes);
  }
  run_blocking(*state(pg), j);
  if (dist_on_gpu(pg)) dev_upload(pg->ctx, buf, j.buf, bytes);
}

void gloo_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  size_t bytes = n * dist_type_size(type), W = (size_t)pg->world_size;
  Job j;
  j.kind = Kind::AllGather;
  j.what = "gloo::allgather";
  j.n = n;
  j.type = type;
  if (dist_on_gpu(pg)) {  // [everyone's] on the host; this rank's part downloaded into its place
    char *host = static_cast<char *>(dist_staging(pg, bytes * W));
    dev_download(pg->ctx, host + (size_t)pg->rank * bytes, send, bytes);
    j.buf = host;
    j.send = host + (size_t)pg->rank * bytes;
  } else {
    j.buf = recv;
    j.send = send;
  }
  run_blocking(*state(pg), j);
  if (dist_on_gpu(pg)) dev_upload(pg->ctx, recv, j.buf, bytes * W);
}

// As the all-reduce: queued on the worker, run in issue order; device buffers at once, through the host.
void gloo_all_gather_start(ProcessGroup *pg, const void *send, DistWork *w) {
  dev_event_record(pg->ctx, &w->start, NULL);
  size_t n = w->n / (size_t)pg->world_size;
  if (dist_on_gpu(pg)) {  // staged through the host: nothing to overlap, gather now
    gloo_all_gather(pg, send, w->buf, n, w->type);
    dev_event_record(pg->ctx, &w->end, NULL);
    w->done = true;
    return;
  }
  Job &j = *static_cast<Job *>(w->job);
  j.kind = Kind::AllGather;
  j.what = "gloo::allgather";
  j.buf = w->buf;
  j.send = send;  // this rank's part of buf for the in-place form (all_gather() then gives no input)
  j.n = n;
  j.type = w->type;
  enqueue(*state(pg), j);
}

void gloo_barrier(ProcessGroup *pg) {
  Job j;
  j.kind = Kind::Barrier;
  j.what = "gloo::barrier";
  run_blocking(*state(pg), j);
}

void gloo_destroy(ProcessGroup *pg) {
  watchdog_enter("the Gloo shutdown (last collectives, the worker thread)");
  stop_worker(pg);
  watchdog_leave();
}

const char *gloo_failure(ProcessGroup *pg) {
  Gloo *g = state(pg);
  std::lock_guard<std::mutex> held(g->lock);
  return g->failed.empty() ? nullptr : g->failed.c_str();  // set once; lives until dist_reconnect()
}

// A recoverable group's new mesh: the old one torn down first, then the rendezvous of the new members
// at the store another process serves (the lighthouse's), under the group's own prefix.
void gloo_reconnect(ProcessGroup *pg, const DistMeeting *m) {
  if (!m) {  // dist_abandon(): the failed group's pairs close now
    if (pg->gloo) stop_worker(pg);
    return;
  }
  if (!pg->mpi_up) check_set_abort(gloo_abort);
  std::set_terminate(on_terminate);
  signal(SIGPIPE, SIG_IGN);
  watchdog_enter("a new Gloo group (every member must join)");
  if (pg->gloo) stop_worker(pg);
  if (m->world_size > 1) {
    double wait_s = m->timeout_s > 0 ? m->timeout_s : pg->timeout;  // step 09: --ft_quorum_timeout
    ::Store *s = store_connect(m->host, m->port, m->rank, m->world_size, wait_s);
    auto context = connect_mesh(pg, s, m->prefix, wait_s);
    store_close(s);
    start_worker(pg, context);
  }
  watchdog_leave();
}

// Several ranks meet at rank 0's store on the bootstrap address (an environment launch: dist_init
// refuses Gloo under mpirun with several ranks); one process needs no context (dist.c's solo case).
void gloo_connect(ProcessGroup *pg) {
  if (pg->world_size == 1) return;
  char host[INET6_ADDRSTRLEN + 80];
  int port = dist_bootstrap_address(host, sizeof host);
  if (port < 0) die(1, "rank %d: the Gloo ranks meet at MASTER_ADDR:MASTER_PORT + 1; set both", pg->rank);
  connect_at(pg, host, port);
}

// Gloo has no groups of collectives: each runs when it is called (dist_group_start() does nothing).
void gloo_group(ProcessGroup *) {}

}  // namespace

// Filled member by member: C++17 has no designated initializers.
extern "C" const DistBackendOps *dist_gloo_ops(void) {
  static const DistBackendOps ops = [] {
    DistBackendOps o{};
    o.name = "gloo";
    o.library = "Gloo";
    o.built = true;
    o.connect = gloo_connect;
    o.all_reduce = gloo_all_reduce;
    o.all_reduce_start = gloo_all_reduce_start;
    o.reduce_scatter_start = gloo_reduce_scatter_start;
    o.all_gather = gloo_all_gather;
    o.all_gather_start = gloo_all_gather_start;
    o.broadcast = gloo_broadcast;
    o.barrier = gloo_barrier;
    o.test = gloo_test;
    o.wait = gloo_wait;
    o.work_init = gloo_work_init;
    o.work_free = gloo_work_free;
    o.group_start = gloo_group;
    o.group_end = gloo_group;
    o.destroy = gloo_destroy;
    o.failure = gloo_failure;
    o.reconnect = gloo_reconnect;
    return o;
  }();
  return &ops;
}
