#!/usr/bin/env bash
# Restarts a failed training job, as torchrun's elastic agent does:
#   scripts/restart.sh --max_restarts K -- COMMAND [ARGS...]
# runs COMMAND (any launch: mpirun ..., srun ..., scripts/launch.sh ...) and, each time it fails, stops
# whatever is left of it and runs it again, at most K times. Every rank restarts (a whole new launch);
# the program itself continues from its last snapshot (--save_steps N --resume auto). Each attempt runs
# in a session of its own (setsid), so that a stop reaches every process it started, mpirun's ranks too.
#
# Each attempt sees TORCHELASTIC_RESTART_COUNT (0 for the first, then 1, 2, ...) and
# TORCHELASTIC_MAX_RESTARTS=K, as torchrun's workers do. Every restart is logged with the failure it
# follows. Status 75 from an attempt is the trainers' preemption exit (SIGTERM: the step finished, the
# checkpoint written); it is restarted like any failure, and said so. A trainer preempted with saving
# off (--save_interval 0, no --save_steps) writes nothing and exits 143, as SIGTERM's death reads.
#
# Exit status: 0 as soon as an attempt succeeds; otherwise the last attempt's status, after a line
# saying that the limit was reached. SIGTERM, SIGINT or SIGHUP to restart.sh ends the attempt in
# progress (SIGTERM to every process of its session, STOP_GRACE seconds, then SIGKILL), starts no other,
# and exits with 128 + the signal's number. RESTART_DELAY (default 1) is the pause before a restart.
# Both are seconds, fractions allowed (STOP_GRACE is counted in tenths, rounded up).
#
# mpirun (Open MPI) answers a SIGTERM of its own with SIGTERM to its ranks and SIGKILL one second
# later, whatever STOP_GRACE says. So when the attempt is an mpirun (mpirun, mpiexec, orterun), the
# SIGTERM goes to every other process of its session, its ranks on this node, and not to mpirun, which
# ends when they do; the ranks have STOP_GRACE to finish their step and save. (Ranks on other nodes get
# nothing: the trainers' preemption agreement stops them too; see common/ckpt/preempt.h.)
#
# SIGKILL to restart.sh cannot be trapped: so that the attempt is not left running unsupervised, it
# starts under `setpriv --pdeathsig TERM` (util-linux), and gets SIGTERM when restart.sh dies (an
# mpirun then gets it itself: its ranks have its 1 s). Where setpriv lacks --pdeathsig, restart.sh
# says so at start and runs without it.
set -uo pipefail
me=${0##*/}
PREEMPTED=75           # common/ckpt/preempt.h: PREEMPT_EXIT_STATUS
PREEMPTED_UNSAVED=143  # common/ckpt/preempt.h: PREEMPT_UNSAVED_EXIT_STATUS (128 + SIGTERM)
usage() {
  echo "usage: $me --max_restarts K -- COMMAND [ARGS...]" >&2
  exit 2
}

max=
while [ $# -gt 0 ]; do
  case $1 in
    --max_restarts) [ $# -ge 2 ] || usage; max=$2; shift 2 ;;
    --max_restarts=*) max=${1#*=}; shift ;;
    --) shift; break ;;
    *) echo "$me: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$max" ] && [ $# -gt 0 ] || usage
if ! [[ $max =~ ^(0|[1-9][0-9]{0,5})$ ]]; then
  echo "$me: --max_restarts needs a number 0..999999 (decimal, no leading zeros), got '$max'" >&2
  exit 2
fi
STOP_GRACE=${STOP_GRACE:-10}    # seconds an attempt has to end after SIGTERM before it gets SIGKILL
RESTART_DELAY=${RESTART_DELAY:-1}
for v in STOP_GRACE RESTART_DELAY; do
  [[ ${!v} =~ ^[0-9]{1,6}(\.[0-9]+)?$ ]] ||
    { echo "$me: $v must be a number of seconds (such as 10 or 1.5), got '${!v}'" >&2; exit 2; }
done
# STOP_GRACE in tenths of a second, rounded up (1.5: 15, 0.05: 1), as stop_attempt polls.
[[ $STOP_GRACE =~ ^([0-9]+)(\.([0-9]+))?$ ]]
frac=${BASH_REMATCH[3]}0  # at least one digit
grace_tenths=$((10#${BASH_REMATCH[1]} * 10 + ${frac:0:1}))
[[ ${frac:1} =~ [1-9] ]] && grace_tenths=$((grace_tenths + 1))
export TORCHELASTIC_MAX_RESTARTS=$max
pdeathsig=(setpriv --pdeathsig TERM --)
if ! setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then
  echo "$me: setpriv --pdeathsig is not available (util-linux 2.33 or later): if restart.sh is killed" \
       "with SIGKILL, the attempt in progress goes on unsupervised" >&2
  pdeathsig=()
fi

sid=  # the attempt in progress: its session id (= the pid setsid ran as)
# Whether any process of the attempt's session is still alive.
alive() { [ -n "$sid" ] && pgrep -s "$sid" >/dev/null; }
# Ends every process of the attempt's session: SIGTERM, up to STOP_GRACE seconds, then SIGKILL. An
# mpirun that has started its ranks gets no SIGTERM (its own would SIGKILL them a second later).
stop_attempt() {
  [ -n "$sid" ] || return 0
  local others
  others=$(pgrep -s "$sid" | grep -vx "$sid")
  case $(cat "/proc/$sid/comm" 2>/dev/null) in
    mpirun | mpiexec | orterun)
      if [ -n "$others" ]; then
        kill -TERM $others 2>/dev/null
      else
        kill -TERM "$sid" 2>/dev/null
      fi ;;
    *) pkill -TERM -s "$sid" 2>/dev/null ;;
  esac
  local tenths
  for ((tenths = 0; tenths < grace_tenths; tenths++)); do
    alive || break
    sleep 0.1
  done
  pkill -KILL -s "$sid" 2>/dev/null
  wait "$sid" 2>/dev/null
  sid=
}
on_signal() {
  trap '' TERM INT HUP  # a second signal must not interrupt the clean-up
  echo "$me: got SIG$1; stopping attempt $attempt; no further attempt" >&2
  stop_attempt
  exit $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

# "status 137 (killed by SIGKILL)", "status 75 (preempted: checkpoint written)", "status 1".
describe() {
  if [ "$1" -eq $PREEMPTED ]; then
    echo "status $1 (preempted: checkpoint written)"
  elif [ "$1" -eq $PREEMPTED_UNSAVED ]; then
    echo "status $1 (killed by SIGTERM, or preempted with saving off: no checkpoint written)"
  elif [ "$1" -gt 128 ] && name=$(kill -l $(($1 - 128)) 2>/dev/null); then
    echo "status $1 (killed by SIG$name)"
  else
    echo "status $1"
  fi
}

for ((attempt = 0; ; attempt++)); do
  export TORCHELASTIC_RESTART_COUNT=$attempt
  # A background job of a script is not a process-group leader, so setsid does not fork: $! is the
  # new session's id. Background jobs ignore SIGINT; the clean-up sends SIGTERM anyway. setpriv
  # execs the command in the same process, whose parent is restart.sh: SIGTERM when restart.sh dies.
  setsid "${pdeathsig[@]}" "$@" &
  sid=$!
  wait "$sid"
  status=$?
  pkill -KILL -s "$sid" 2>/dev/null  # whatever the launch left behind must not outlive it
  sid=
  if [ $status -eq 0 ]; then
    [ "$attempt" -gt 0 ] && echo "$me: attempt $attempt succeeded after $attempt restarts" >&2
    exit 0
  fi
  if [ "$attempt" -ge "$max" ]; then
    echo "$me: attempt $attempt failed with $(describe $status); the limit of $max restarts was reached" >&2
    exit $status
  fi
  echo "$me: attempt $attempt failed with $(describe $status); restart $((attempt + 1)) of $max" \
       "in ${RESTART_DELAY} s" >&2
  sleep "$RESTART_DELAY" &
  wait $!
done
