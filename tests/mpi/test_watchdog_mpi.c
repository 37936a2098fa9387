// test_watchdog_mpi.c: the watchdog covers start-up and shutdown, not only the collectives.
//   mpirun -np 2 test_watchdog_mpi init      rank 0 arrives 30 s late: rank 1 waits in MPI_Init
//   mpirun -np 2 test_watchdog_mpi finalize  rank 0 freezes before leaving: rank 1 waits in
//                                            MPI_Finalize
// In both, rank 1's watchdog (timeout 1 s) must end it, printing "watchdog: MPI_Init has waited" or
// "watchdog: MPI_Finalize has waited", and mpirun then ends rank 0; without the watchdog the job
// would last the 30 s and print neither (CTest checks the line, and its timeout is 20 s).
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "dist.h"

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "init") && strcmp(argv[1], "finalize"))) {
    fprintf(stderr, "usage: mpirun -np 2 %s init|finalize\n", argv[0]);
    return 2;
  }
  bool late_start = strcmp(argv[1], "init") == 0;
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  int rank = r ? atoi(r) : 0;
  if (late_start && rank == 0) sleep(30);
  ProcessGroup pg;
  dist_init(&pg, "mpi", DEVICE_CPU, 1.0);
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  dist_connect(&pg, &c);
  dist_barrier(&pg);
  if (!late_start && pg.rank == 0) sleep(30);
  dist_destroy(&pg);
  device_free(&c);
  printf("rank %d left without the watchdog firing\n", rank);
  return 0;
}
