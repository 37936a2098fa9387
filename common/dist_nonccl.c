// dist_nonccl.c: the NCCL backend in a build without NCCL. dist.c refuses --backend nccl first, so
// these only document the contract.
#include "check.h"
#include "dist_backend.h"

#define NO_NCCL() \
  die(1, "this program was built without NCCL (no CUDA toolkit at build time); use --backend mpi")

bool dist_have_nccl(void) { return false; }
void nccl_check_impl(int result, const char *call, const char *file, int line) {
  (void)result, (void)call, (void)file, (void)line;
  NO_NCCL();
}
void dist_nccl_connect(ProcessGroup *pg) { (void)pg, NO_NCCL(); }
void dist_nccl_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  (void)pg, (void)buf, (void)n, (void)type, (void)op;
  NO_NCCL();
}
void dist_nccl_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  (void)pg, (void)buf, (void)n, (void)type, (void)root;
  NO_NCCL();
}
void dist_nccl_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  (void)pg, (void)send, (void)recv, (void)n, (void)type;
  NO_NCCL();
}
void dist_nccl_barrier(ProcessGroup *pg) { (void)pg, NO_NCCL(); }
void dist_nccl_destroy(ProcessGroup *pg) { (void)pg, NO_NCCL(); }
void dist_nccl_all_reduce_on(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op,
                             void *stream) {
  (void)pg, (void)buf, (void)n, (void)type, (void)op, (void)stream;
  NO_NCCL();
}
int dist_nccl_poll(void *pg, double timeout, char *why) {
  (void)pg, (void)timeout, (void)why;
  NO_NCCL();
}
void dist_nccl_bind(void *pg) { (void)pg, NO_NCCL(); }
void dist_nccl_abort(void *pg) { (void)pg, NO_NCCL(); }
void dist_nccl_group_start(ProcessGroup *pg) { (void)pg, NO_NCCL(); }
void dist_nccl_group_end(ProcessGroup *pg) { (void)pg, NO_NCCL(); }
