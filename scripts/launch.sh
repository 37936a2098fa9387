#!/usr/bin/env bash
# A minimal single-node launcher in the style of torchrun, for machines without MPI:
#   scripts/launch.sh [--max_restarts K] -n N [--] PROGRAM [ARGS...]
# starts N copies of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
# MASTER_PORT set (MASTER_PORT from the environment, default 29500; NCCL bootstraps on the port after
# it), and OMP_NUM_THREADS=1 unless it is set (N > 1, as torchrun). The options come before PROGRAM,
# in any order (`--max_restarts=K` too); everything from PROGRAM on is the program's own. If any rank fails, the others are stopped, so nothing is left hanging; the
# exit status is the first failure's. SIGTERM, SIGINT (Ctrl-C) or SIGHUP (the terminal closed) to the
# launcher stops every rank too, and the launcher then exits with 128 + the signal's number. Stopping
# a rank is SIGTERM, then SIGKILL STOP_GRACE seconds later (default 10; fractions such as 1.5 are
# counted in tenths, rounded up). --max_restarts K runs the whole launch under scripts/restart.sh: when
# it fails, every rank is started again, at most K times.
set -uo pipefail
usage() {
  echo "usage: $0 [--max_restarts K] -n N [--] PROGRAM [ARGS...]" >&2
  exit 2
}
restarts=
n=
while [ $# -gt 0 ]; do
  case $1 in
    -n) [ $# -ge 2 ] || usage; n=$2; shift 2 ;;
    --max_restarts) [ $# -ge 2 ] || usage; restarts=$2; shift 2 ;;
    --max_restarts=*) restarts=${1#*=}; shift ;;
    --) shift; break ;;
    -*) echo "$0: unknown option '$1' (before PROGRAM: -n N, --max_restarts K)" >&2; usage ;;
    *) break ;;
  esac
done
[ -n "$n" ] || usage
# Decimal without leading zeros: "08" is not octal 8 and "010" is not 8 ranks with WORLD_SIZE=010.
if ! [[ $n =~ ^[1-9][0-9]{0,3}$ ]]; then
  echo "$0: -n needs a positive decimal number 1..9999 without leading zeros, got '$n'" >&2
  exit 2
fi
if [ -n "$restarts" ] && ! [[ $restarts =~ ^(0|[1-9][0-9]{0,5})$ ]]; then  # restart.sh's rule, said here
  echo "$0: --max_restarts needs a number 0..999999 (decimal, no leading zeros), got '$restarts'" >&2
  exit 2
fi
[ $# -gt 0 ] || usage
if [ -n "$restarts" ]; then  # the same loop as scripts/restart.sh's, not a copy of it
  exec "$(dirname "$0")/restart.sh" --max_restarts "$restarts" -- "$0" -n "$n" -- "$@"
fi
STOP_GRACE=${STOP_GRACE:-10}  # seconds a rank has to end after SIGTERM before it gets SIGKILL
# A number of seconds, as restart.sh takes it: digits, and a fraction after a dot (1.5); counted in
# tenths, rounded up (0.05 is one tenth), as the loop below polls.
if ! [[ $STOP_GRACE =~ ^([0-9]{1,6})(\.([0-9]+))?$ ]]; then
  echo "$0: STOP_GRACE must be a number of seconds (such as 10 or 1.5), got '$STOP_GRACE'" >&2
  exit 2
fi
frac=${BASH_REMATCH[3]}0  # at least one digit
grace_tenths=$((10#${BASH_REMATCH[1]} * 10 + ${frac:0:1}))
[[ ${frac:1} =~ [1-9] ]] && grace_tenths=$((grace_tenths + 1))
export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
# As torchrun does: with several ranks on the node, one OpenMP/OpenBLAS thread per rank unless
# OMP_NUM_THREADS says otherwise. N ranks each with a thread per core oversubscribe the node, and
# OpenBLAS splits a GEMM's sums by its thread count: without this a step's digest here differed from
# mpirun's (whose ranks are bound to a core each) and torchrun's, on the same flags.
if [ "$n" -gt 1 ] && [ -z "${OMP_NUM_THREADS:-}" ]; then export OMP_NUM_THREADS=1; fi

pids=()
# Ends every rank that is still running: SIGTERM, then SIGKILL to any that outlives STOP_GRACE
# seconds. (Background jobs of a script ignore SIGINT, so the ranks always get SIGTERM.) SIGCONT
# after it: a frozen (stopped) rank gets its SIGTERM now rather than after the grace period.
stop_ranks() {
  kill -TERM "${pids[@]}" 2>/dev/null
  kill -CONT "${pids[@]}" 2>/dev/null
  for ((tenths = 0; tenths < grace_tenths; tenths++)); do
    kill -0 "${pids[@]}" 2>/dev/null || break  # true while any rank is alive
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
}
on_signal() {
  trap '' TERM INT HUP  # a second Ctrl-C must not interrupt the clean-up
  echo "$0: got SIG$1; stopping the ranks" >&2
  stop_ranks
  exit $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r "$@" &
  pids+=($!)
done
# The first rank to fail stops the others. When `wait -n` finds no child left to report (127) before
# every rank was reported, ranks that ended together were taken off bash's job table before it looked
# (a non-interactive shell does that); `wait PID` still has each one's status (and a rank that really
# exited with 127, a program not found, still reads 127 there).
status=0
for ((left = n; left > 0; left--)); do
  wait -n
  rc=$?
  if [ $rc -eq 127 ]; then
    rc=0
    for pid in "${pids[@]}"; do
      wait "$pid" || { rc=$?; break; }
    done
    left=1  # every rank has ended
  fi
  if [ $rc -ne 0 ]; then
    status=$rc
    echo "$0: a rank exited with status $rc; stopping the others" >&2
    stop_ranks
    break
  fi
done
exit $status
