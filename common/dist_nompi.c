// dist_nompi.c: the MPI backend in a build without MPI. dist.c never reaches these unless a user
// asks for MPI; each says what to do instead.
#include <stdlib.h>

#include "check.h"
#include "dist_backend.h"

#define NO_MPI() \
  die(1, "this program was built without MPI; install Open MPI (libopenmpi-dev) and rebuild, or use " \
         "--backend nccl with a torchrun-style launch")

bool dist_have_mpi(void) { return false; }
void mpi_check_impl(int err, const char *call, const char *file, int line) {
  (void)err, (void)call, (void)file, (void)line;
  NO_MPI();
}
void dist_mpi_init(ProcessGroup *pg) { (void)pg, NO_MPI(); }
void dist_mpi_set_abort(void) { NO_MPI(); }
void dist_mpi_all_reduce(ProcessGroup *pg, void *buf, size_t n, DistType type, DistOp op) {
  (void)pg, (void)buf, (void)n, (void)type, (void)op;
  NO_MPI();
}
void dist_mpi_broadcast(ProcessGroup *pg, void *buf, size_t n, DistType type, int root) {
  (void)pg, (void)buf, (void)n, (void)type, (void)root;
  NO_MPI();
}
void dist_mpi_broadcast_bytes(void *buf, size_t bytes, int root) { (void)buf, (void)bytes, (void)root, NO_MPI(); }
void dist_mpi_all_gather(ProcessGroup *pg, const void *send, void *recv, size_t n, DistType type) {
  (void)pg, (void)send, (void)recv, (void)n, (void)type;
  NO_MPI();
}
void dist_mpi_barrier(void) { NO_MPI(); }
void dist_mpi_finalize(void) { NO_MPI(); }
void dist_mpi_all_reduce_start(ProcessGroup *pg, DistWork *w) { (void)pg, (void)w, NO_MPI(); }
bool dist_mpi_test(ProcessGroup *pg, DistWork *w) { (void)pg, (void)w, NO_MPI(); }
void dist_mpi_wait(ProcessGroup *pg, DistWork *w) { (void)pg, (void)w, NO_MPI(); }
