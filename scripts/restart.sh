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
# checkpoint written); it is restarted like any failure, and said so.
#
# Exit status: 0 as soon as an attempt succeeds; otherwise the last attempt's status, after a line
# saying that the limit was reached. SIGTERM, SIGINT or SIGHUP to restart.sh ends the attempt in
# progress (SIGTERM to every process of its session, STOP_GRACE seconds, then SIGKILL), starts no other,
# and exits with 128 + the signal's number. RESTART_DELAY (default 1) is the pause before a restart.
set -uo pipefail
me=${0##*/}
PREEMPTED=75  # common/preempt.h: PREEMPT_EXIT_STATUS
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
  [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "$me: $v must be a number of seconds, got '${!v}'" >&2; exit 2; }
done
export TORCHELASTIC_MAX_RESTARTS=$max

sid=  # the attempt in progress: its session id (= the pid setsid ran as)
# Whether any process of the attempt's session is still alive.
alive() { [ -n "$sid" ] && pgrep -s "$sid" >/dev/null; }
# Ends every process of the attempt's session: SIGTERM, up to STOP_GRACE seconds, then SIGKILL.
stop_attempt() {
  [ -n "$sid" ] || return 0
  pkill -TERM -s "$sid" 2>/dev/null
  local tenths
  for ((tenths = 0; tenths < ${STOP_GRACE%.*} * 10; tenths++)); do
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
  elif [ "$1" -gt 128 ] && name=$(kill -l $(($1 - 128)) 2>/dev/null); then
    echo "status $1 (killed by SIG$name)"
  else
    echo "status $1"
  fi
}

for ((attempt = 0; ; attempt++)); do
  export TORCHELASTIC_RESTART_COUNT=$attempt
  # A background job of a script is not a process-group leader, so setsid does not fork: $! is the
  # new session's id. Background jobs ignore SIGINT; the clean-up sends SIGTERM anyway.
  setsid "$@" &
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
