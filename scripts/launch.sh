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
#
# --ft (live recovery, step 09): starts the lighthouse (LIGHTHOUSE, default PROGRAM's folder's
# lighthouse) on MASTER_PORT (its store on MASTER_PORT + 1), with the program's own --min_replicas,
# --heartbeat_timeout, --join_timeout and --ft_quorum_timeout; gives each rank DDP_LIGHTHOUSE, its slot as
# REPLICA_ID and REPLICA_INCARNATION; and when a rank dies, says so and lets the others go on. With
# --replace it then starts the dead slot again (incarnation + 1, at most MAX_REPLACEMENTS times a slot,
# default 3; not after a replica finished, nor after status 76, a refusal, nor when no other replica
# lives to heal from), and the newcomer joins and heals from a peer (a replica left out of a quorum,
# status 78, is replaced too). The exit status is 0 when a replica finished training (status 0); else 76
# when the lighthouse refused a quorum (too few replicas, replicas that disagree: the job cannot go
# on); else the first failure's. SIGTERM, SIGINT or SIGHUP stops the replicas still running (as above),
# then the lighthouse.
set -uo pipefail
usage() {
  echo "usage: $0 [--max_restarts K | --ft [--replace]] -n N [--] PROGRAM [ARGS...]" >&2
  exit 2
}
restarts=
n=
ft=
replace=
while [ $# -gt 0 ]; do
  case $1 in
    -n) [ $# -ge 2 ] || usage; n=$2; shift 2 ;;
    --max_restarts) [ $# -ge 2 ] || usage; restarts=$2; shift 2 ;;
    --max_restarts=*) restarts=${1#*=}; shift ;;
    --ft) ft=1; shift ;;
    --replace) replace=1; shift ;;
    --) shift; break ;;
    -*) echo "$0: unknown option '$1' (before PROGRAM: -n N, --max_restarts K, --ft, --replace)" >&2; usage ;;
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
if [ -n "$replace" ] && [ -z "$ft" ]; then
  echo "$0: --replace starts a dead replica again under --ft (live recovery): add --ft" >&2
  exit 2
fi
MAX_REPLACEMENTS=${MAX_REPLACEMENTS:-3}
if ! [[ $MAX_REPLACEMENTS =~ ^[0-9]{1,4}$ ]]; then
  echo "$0: MAX_REPLACEMENTS must be a number 0..9999, got '$MAX_REPLACEMENTS'" >&2
  exit 2
fi
if [ -n "$ft" ] && [ -n "$restarts" ]; then
  echo "$0: --ft keeps the survivors running; --max_restarts restarts every rank: choose one" >&2
  exit 2
fi
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
  wait "${pids[@]}" 2>/dev/null  # the ranks (not --ft's lighthouse: stopped after them)
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

# --ft: the value the program was given for flag $1 (`--flag V` or `--flag=V`), else $2.
program_flag() {
  local name=$1 value=$2 prev=
  shift 2
  for a in "$@"; do
    [ "$prev" = "$name" ] && value=$a
    case $a in "$name="*) value=${a#*=} ;; esac
    prev=$a
  done
  echo "$value"
}

# --ft: a signal to the launcher stops the replicas still running (those that ended are not signalled:
# their pids may belong to others by now), and then the lighthouse, which a replica stopping after its
# step may still need. The line goes to the launcher's stderr (fd 3 while the replicas are watched).
on_signal_ft() {
  trap '' TERM INT HUP
  { echo "$0: got SIG$1; stopping the replicas, then the lighthouse" >&3; } 2>/dev/null ||
    echo "$0: got SIG$1; stopping the replicas, then the lighthouse" >&2
  local live=() k
  for ((k = 0; k < ${#pids[@]}; k++)); do
    [ -z "${ended[k]:-}" ] && live+=("${pids[k]}")
  done
  pids=("${live[@]}")
  [ ${#pids[@]} -gt 0 ] && stop_ranks
  kill -TERM "$lh" 2>/dev/null
  wait "$lh" 2>/dev/null
  exit $(($2 + 128))
}

# --ft: whether a replica other than slot $1 still runs (a replacement needs one to heal from).
peers_alive() {
  local k
  for ((k = 0; k < n; k++)); do
    [ "$k" != "$1" ] && [ -z "${ended[k]:-}" ] && kill -0 "${pids[k]}" 2>/dev/null && return 0
  done
  return 1
}

# --ft: the lighthouse, then the replicas; a replica that dies is reported and the others go on.
launch_ft() {
  local lighthouse=${LIGHTHOUSE:-$(dirname "$1")/lighthouse}
  if [ ! -x "$lighthouse" ]; then
    echo "$0: --ft needs the lighthouse, $lighthouse (build it: cmake --build build; or set LIGHTHOUSE)" >&2
    exit 2
  fi
  "$lighthouse" --host "$MASTER_ADDR" --port "$MASTER_PORT" --replicas "$n" \
    --min_replicas "$(program_flag --min_replicas 1 "$@")" \
    --heartbeat_timeout "$(program_flag --heartbeat_timeout 2 "$@")" \
    --join_timeout "$(program_flag --join_timeout 1 "$@")" \
    --quorum_timeout "$(program_flag --ft_quorum_timeout 30 "$@")" ${LIGHTHOUSE_LOG:+--log "$LIGHTHOUSE_LOG"} &
  lh=$!
  trap 'on_signal_ft TERM 15' TERM
  trap 'on_signal_ft INT 2' INT
  trap 'on_signal_ft HUP 1' HUP
  export DDP_LIGHTHOUSE=$MASTER_ADDR:$MASTER_PORT
  local -a incarnation=()
  for ((r = 0; r < n; r++)); do
    incarnation[r]=0
    RANK=$r LOCAL_RANK=$r REPLICA_ID=$r REPLICA_INCARNATION=0 "$@" &
    pids+=($!)
  done
  # Polled, not `wait -n`: each replica's end is said with its slot, and the others go on. Bash's own
  # notice of a child killed by a signal ("line N: PID Killed ...") goes to /dev/null; ours to fd 3.
  local status= finished=0 refused=0 left=$n rc
  local -a ended=()
  exec 3>&2
  while [ "$left" -gt 0 ]; do
    sleep 0.05
    for ((r = 0; r < n; r++)); do
      [ -z "${ended[r]:-}" ] && ! kill -0 "${pids[r]}" 2>/dev/null || continue
      wait "${pids[r]}"
      rc=$?
      ended[r]=1
      left=$((left - 1))
      if [ $rc -eq 0 ]; then
        finished=1
      else
        [ $rc -gt 128 ] && echo "$0: replica $r exited on SIG$(kill -l $((rc - 128)) 2>/dev/null) ($rc); the others go on" >&3
        [ $rc -le 128 ] && echo "$0: replica $r exited with status $rc; the others go on" >&3
        [ $rc -eq 76 ] && refused=1  # (78, left out of a quorum, is replaced below)
        if [ -n "$replace" ] && [ "$finished" = 0 ] && [ $rc -ne 76 ] && [ "${incarnation[r]}" -lt "$MAX_REPLACEMENTS" ] &&
          peers_alive "$r"; then
          incarnation[r]=$((incarnation[r] + 1))
          echo "$0: starting replica $r again (incarnation ${incarnation[r]}): it joins and heals from a peer" >&3
          RANK=$r LOCAL_RANK=$r REPLICA_ID=$r REPLICA_INCARNATION=${incarnation[r]} "$@" 2>&3 &
          pids[r]=$!
          ended[r]=
          left=$((left + 1))
          continue
        fi
        [ -z "$status" ] && status=$rc
      fi
    done
  done 2>/dev/null
  exec 3>&-
  kill -TERM "$lh" 2>/dev/null
  wait "$lh" 2>/dev/null
  [ "$finished" = 1 ] && return 0
  [ "$refused" = 1 ] && return 76
  return "${status:-0}"
}

if [ -n "$ft" ]; then
  launch_ft "$@"
  exit $?
fi

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
