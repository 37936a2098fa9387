// test_dist.c: every collective of the process group (common/dist/dist.h) on CPU buffers under mpirun,
// against values each rank can compute for itself. Run: mpirun -np 3 build/bin/test_dist
// (CTest runs it at 2, 3 and 4 ranks). The reduce-scatter and in-place all-gather cases are shared
// with the GPU test (dist_cases.c). Prints one line per check on rank 0 and "N passed, M failed";
// exits 1 on any failure.
#include <stdio.h>
#include <string.h>

#include "dist.h"
#include "dist_cases.h"  // dist_cases.h: expect, expect_passed, expect_failed, dist_cases_zero, dist_cases_half

int main(void) {
  ProcessGroup pg;
  Ctx c;
  dist_init(&pg, "mpi", DEVICE_CPU, 60.0);
  device_init(&c, DEVICE_CPU, 0);
  dist_connect(&pg, &c);
  int W = pg.world_size, r = pg.rank;
  float f[5];
  int ok = 1;

  for (int i = 0; i < 5; i++) f[i] = (float)(r + 1) * (float)(i + 1);
  dist_all_reduce(&pg, f, 5, DIST_FLOAT, DIST_SUM);
  for (int i = 0; i < 5; i++) ok &= f[i] == (float)(W * (W + 1) / 2 * (i + 1));
  expect(&pg, ok, "all-reduce float sum");

  for (int i = 0; i < 5; i++) f[i] = (float)(2 * r);
  dist_all_reduce(&pg, f, 5, DIST_FLOAT, DIST_AVG);
  ok = 1;
  for (int i = 0; i < 5; i++) ok &= f[i] == (float)(W - 1);  // mean of 0, 2, ..., 2(W-1)
  expect(&pg, ok, "all-reduce float average");

  int n[3] = {r, 1, -r};
  dist_all_reduce(&pg, n, 3, DIST_INT, DIST_SUM);
  expect(&pg, n[0] == W * (W - 1) / 2 && n[1] == W && n[2] == -W * (W - 1) / 2, "all-reduce int sum");

  double d[2] = {0.5 * r, 1e-3};
  dist_all_reduce(&pg, d, 2, DIST_DOUBLE, DIST_SUM);
  expect(&pg, d[0] == 0.25 * W * (W - 1) && d[1] == W * 1e-3, "all-reduce double sum");

  for (int i = 0; i < 5; i++) f[i] = r == W - 1 ? 7.0f + i : -1.0f;
  dist_broadcast(&pg, f, 5, DIST_FLOAT, W - 1);
  ok = 1;
  for (int i = 0; i < 5; i++) ok &= f[i] == 7.0f + i;
  expect(&pg, ok, "broadcast from the last rank");

  int mine[2] = {10 * r, 10 * r + 1}, all[2 * 16];
  memset(all, 0xff, sizeof all);
  dist_all_gather(&pg, mine, all, 2, DIST_INT);
  ok = W <= 16;
  for (int q = 0; q < W && q < 16; q++) ok &= all[2 * q] == 10 * q && all[2 * q + 1] == 10 * q + 1;
  expect(&pg, ok, "all-gather in rank order");

  DistWork w[2];
  float a[4] = {1, 2, 3, 4}, b[3] = {(float)r, (float)r, (float)r};
  dist_work_init(&pg, &w[0]);
  dist_work_init(&pg, &w[1]);
  dist_all_reduce_async(&pg, a, 4, DIST_FLOAT, DIST_AVG, &w[0]);  // two in flight at once
  dist_all_reduce_async(&pg, b, 3, DIST_FLOAT, DIST_SUM, &w[1]);
  while (!dist_test(&pg, &w[0])) {
  }
  dist_wait(&pg, &w[0]);
  dist_wait(&pg, &w[1]);
  ok = a[0] == 1 && a[3] == 4;
  for (int i = 0; i < 3; i++) ok &= b[i] == (float)(W * (W - 1) / 2);
  expect(&pg, ok, "two asynchronous all-reduces, tested and waited");
  dist_work_free(&pg, &w[1]);
  dist_work_free(&pg, &w[0]);

  dist_cases_zero(&pg);
  dist_cases_half(&pg);

  dist_barrier(&pg);
  expect(&pg, 1, "barrier");

  int p = expect_passed(), q = expect_failed();
  if (r == 0) printf("%d passed, %d failed\n", p, q);
  dist_destroy(&pg);
  device_free(&c);
  return q ? 1 : 0;
}
