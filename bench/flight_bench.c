// flight_bench: what the flight recorder costs (issue 43). Times flight_record() + two flight_mark()s,
// the work dist.c adds to every collective, over many iterations, and prints the cost per collective
// and per training step of a given number of collectives against a given step time.
//
//   build/bin/flight_bench [ITERATIONS] [COLLECTIVES_PER_STEP] [STEP_MS]
//
// Step 06 of the default model makes 4 collectives per optimizer step at 2 ranks (its two buckets'
// all-reduces, the loss's, the preemption flag's: count them in a ring, scripts/fr_analyze.py) and
// takes about 14.6 ms per step on the course VM (docs/performance.md).
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "flight.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  double per_step = argc > 2 ? atof(argv[2]) : 4, step_ms = argc > 3 ? atof(argv[3]) : 14.6;
  if (iters < 1 || per_step <= 0 || step_ms <= 0) {
    fprintf(stderr, "usage: %s [ITERATIONS > 0] [COLLECTIVES_PER_STEP > 0] [STEP_MS > 0]\n", argv[0]);
    return 2;
  }
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {  // the best of 5: the cost itself, not the machine's noise
    flight_reset();
    double t0 = now();
    for (long i = 0; i < iters; i++) {
      uint64_t s = flight_record("all-reduce", "float32", (size_t)i, "mark_bucket_ready");
      flight_mark(s, FLIGHT_STARTED);
      flight_mark(s, FLIGHT_DONE);
    }
    double ns = (now() - t0) / (double)iters * 1e9;
    if (ns < best) best = ns;
  }
  double share = best * per_step / (step_ms * 1e6);
  printf("flight recorder: %.0f ns per collective (record + started + done, best of 5 x %ld)\n", best, iters);
  printf("at %.0f collectives per step of %.1f ms: %.1f us per step, %.4f %% of the step\n", per_step,
         step_ms, best * per_step / 1e3, 100.0 * share);
  return 0;
}
