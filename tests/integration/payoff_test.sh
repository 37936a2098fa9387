#!/usr/bin/env bash
# bench/payoff.py's clean-up and its BLAS line, at its smallest sizes (--quick --selftest). Scenarios:
#   hup    SIGHUP (a closed terminal) while the slow link's ranks run in the two network namespaces:
#          it exits 129 and leaves nothing: no namespace, no veth, no process that was in them, no
#          temporary folder, no record;
#   stale  a run killed by SIGKILL there (which no script can clean up after) leaves its namespaces,
#          their processes, its temporary folder and its record; the next run removes them before
#          it starts, and leaves alone a record whose process still runs;
#   blas   the memory table says the BLAS kernel it was measured on, and warns under
#          OPENBLAS_CORETYPE=Prescott, a generic fallback on a CPU with AVX2 (OpenBLAS 0.3.34 calls it Katmai).
# hup and stale need root, ip and network namespaces (else exit 77, skipped). Each scenario has a
# TMPDIR and a record folder (DDP_PAYOFF_STATE) of its own, and stops exactly what it started: the
# payoff process group it made, and the namespaces named by that process's id.
#   tests/integration/payoff_test.sh hup|stale|blas BIN_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
scenario=${1:?usage: payoff_test.sh hup|stale|blas BIN_DIR}
bin=${2:?usage: payoff_test.sh hup|stale|blas BIN_DIR}
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
tmp=$(mktemp -d)
pids=()  # the payoff processes started here (each the leader of its own process group)
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill -KILL -- "-$p" 2> /dev/null
    "$root/tests/multinode/nodes.sh" down "$((p % 10000000))" "$tmp" > /dev/null 2>&1
  done
  [ -n "${sleeper:-}" ] && { kill -KILL "$sleeper"; wait "$sleeper"; } 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
export TMPDIR=$tmp/t DDP_PAYOFF_STATE=$tmp/state
mkdir -p "$TMPDIR"
bad=0
want() {  # DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok      $what"; else echo "WRONG   $what"; bad=1; fi
}
need_netns() {
  [ "$(id -u)" -eq 0 ] || { echo "payoff_test: skipped: namespaces need root"; exit 77; }
  command -v ip > /dev/null && command -v tc > /dev/null || { echo "payoff_test: skipped: no ip or tc"; exit 77; }
  ip netns add "ddpt-$$" 2> /dev/null || { echo "payoff_test: skipped: cannot make a network namespace"; exit 77; }
  ip netns del "ddpt-$$"
}
# start OUT ARGS...: payoff in a process group of its own (setsid), its pid in $pid
start() {
  local out=$1
  shift
  setsid "$PY" "$root/bench/payoff.py" "$@" --bin "$bin" > "$out" 2>&1 &
  pid=$!
  pids+=("$pid")
}
# ranks_running PID: waits until a process runs in PID's namespace a (then its pids in $inside)
ranks_running() {
  local i ns=ddpmn-$(($1 % 10000000))-a
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$1" 2> /dev/null || return 1
    inside=$(ip netns pids "$ns" 2> /dev/null | tr '\n' ' ')
    [ -n "$inside" ] && return 0
    sleep 0.1
  done
  return 1
}
finished() {  # PID GUARD_SECONDS: waits for it to end; false if it has not by then
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2> /dev/null || return 0
    sleep 0.1
  done
  return 1
}
no_namespaces() {  # ID: neither namespace, nor the veth's end on the host
  ! ip netns list | grep -qE "^ddpmn-$1-(a|b)( |$)" && ! ip link show "ddpa$1" > /dev/null 2>&1
}
gone() {  # PIDS...: none of them runs (a zombie waiting for its reaper counts as gone); SIGKILL takes
  # effect asynchronously, so this waits up to 5 s
  local p i
  for ((i = 0; i < 50; i++)); do
    for p in "$@"; do
      [ -r "/proc/$p/stat" ] && [ "$(sed 's/.*) //' "/proc/$p/stat" 2> /dev/null | cut -d' ' -f1)" != Z ] && break
      p=""
    done
    [ -z "$p" ] && return 0
    sleep 0.1
  done
  return 1
}
none_left() { [ -z "$(ls -A "$TMPDIR")" ]; }  # no temporary folder of payoff's
no_record() { [ -z "$(ls -A "$DDP_PAYOFF_STATE" 2> /dev/null)" ]; }

case $scenario in
  hup)
    need_netns
    start "$tmp/out" slowlink --quick --selftest
    want "the slow link's ranks run in the namespaces" ranks_running "$pid"
    id=$((pid % 10000000))
    kill -HUP "$pid"
    want "it ends after SIGHUP (guard: 60 s)" finished "$pid" 60
    wait "$pid"
    rc=$?
    want "exit status 129 (it was $rc)" [ "$rc" -eq 129 ]
    want "no namespace ddpmn-$id-a/-b, no veth ddpa$id" no_namespaces "$id"
    want "the processes that ran in them ($inside) are gone" gone $inside
    want "no temporary folder is left" none_left
    want "its record is removed" no_record
    ;;
  stale)
    need_netns
    # a live run's record, naming a folder of payoff's: left alone
    sleep 600 &
    sleeper=$!
    mkdir -p "$DDP_PAYOFF_STATE" "$TMPDIR/payoff.live"
    start_ticks=$(awk '{print $22}' "/proc/$sleeper/stat")
    printf '{"pid": %d, "start": "%s", "undo": [["dir", "%s"]]}\n' "$sleeper" "$start_ticks" \
      "$TMPDIR/payoff.live" > "$DDP_PAYOFF_STATE/$sleeper.json"
    start "$tmp/out1" slowlink --quick --selftest
    want "the first run's ranks run in the namespaces" ranks_running "$pid"
    first=$pid id=$((pid % 10000000))
    kill -KILL "$first"
    wait "$first" 2> /dev/null
    want "SIGKILL left its namespaces (as it must)" bash -c "ip netns list | grep -q '^ddpmn-$id-a'"
    start "$tmp/out2" memory --quick --selftest
    want "the next run ends by itself (guard: 180 s)" finished "$pid" 180
    wait "$pid"
    rc=$?
    want "the next run succeeds (exit status $rc)" [ "$rc" -eq 0 ]
    want "it says what it removed" grep -q "removing what an earlier run (pid $first" "$tmp/out2"
    want "the first run's namespaces are gone" no_namespaces "$id"
    want "the processes that ran in them ($inside) are gone" gone $inside
    want "its temporary folders are gone, the live run's is there" \
      [ "$(ls -A "$TMPDIR")" = payoff.live ]
    want "only the live run's record is left" [ "$(ls -A "$DDP_PAYOFF_STATE")" = "$sleeper.json" ]
    ;;
  blas)
    grep -qw avx2 /proc/cpuinfo || { echo "payoff_test: skipped: this CPU has no AVX2"; exit 77; }
    first=$("$bin/01_single_gpu" --device cpu --data synthetic --dataset_size 128 --max_steps 1 --epochs 1 \
      --save_interval 0 2>&1 | head -1)  # (a variable: grep -q on the pipe would end it early, pipefail)
    if [[ $first == "blas: none"* ]]; then
      echo "payoff_test: skipped: a build without OpenBLAS (DDP_BLAS=none) has no kernel to fall back"
      exit 77
    fi
    export OPENBLAS_CORETYPE=Prescott
    start "$tmp/out" memory --quick --selftest
    want "it ends by itself (guard: 180 s)" finished "$pid" 180
    wait "$pid"
    rc=$?
    want "it succeeds (exit status $rc)" [ "$rc" -eq 0 ]
    # (the OpenBLAS of the build names that kernel: 0.3.21 Prescott, 0.3.34 Katmai)
    kernel=$(sed -nE 's/^measured on: OpenBLAS .*, kernel (\S+)$/\1/p' "$tmp/out")
    want "the table says the kernel it was measured on ($kernel)" [ -n "$kernel" ]
    want "and warns: a generic fallback" grep -qE "^WARNING: blas: kernel $kernel is a generic fallback" "$tmp/out"
    want "both after the table's rows" \
      bash -c "sed -n '/^program  *ranks/,\$p' '$tmp/out' | grep -q '^WARNING: blas:'"
    ;;
  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
if [ $bad -ne 0 ] || [ -n "${SHOW:-}" ]; then
  for f in "$tmp"/out*; do
    echo "---- ${f##*/}"
    cat "$f"
  done
fi
exit $bad
