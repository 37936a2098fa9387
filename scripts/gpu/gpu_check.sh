#!/usr/bin/env bash
# GPU checks, for a machine with NVIDIA GPUs (DESIGN §8), with no network and no package installs.
# It may get one try on a borrowed machine, so every row of its table is written the moment it is
# decided, and whatever stops it (a deadline, Ctrl-C, SIGTERM) leaves the table so far and the logs.
#   0. the GPU (nvidia-smi) and, in a second, whether the libnccl.so.2 the programs will load carries
#      every collective the code calls (scripts/gpu/nccl_caps.py: a library built with a subset runs a
#      missing one as an empty kernel, with no error);
#   1. configure and build (only the programs it runs) with CUDA and NCCL (MPI when present); the
#      NCCL it linked and the one it loads; the GPUs CUDA sees;
#  1b. a smoke test of multi-rank NCCL: build/bin/probe at 2 ranks (2 GPUs, or 2 ranks on one GPU
#      with NCCL >= 2.30), 1 MiB at most, NCCL_DEBUG=INFO, under `timeout 45`. When it fails, every
#      later multi-rank row is FAILED "multi-rank NCCL does not work here" without running;
#   2. the `gpu` tests: every CUDA op against its CPU reference, the MLP on both devices, the order of
#      step 06's bucket all-reduce, and the reduce-scatter and in-place all-gather on GPU buffers;
#   3. step 01 on the GPU against the CPU, same seed and data order: one step from the same state
#      within the tests' float32 error model (the many-step runs: the same steps, losses shown);
#   4. the process group over NCCL at world size 1: step 05's exact resume; steps 06 = 05, 07 = 06,
#      08 = 06; two ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE end with a clear message;
#   5. when NCCL >= 2.30 is loaded or the node has 2 or more GPUs: steps 04-08 at np = 2, 4 and the
#      number of GPUs (each rank its own GPU; above the GPU count only with NCCL >= 2.30, every rank
#      on GPU 0 with NCCL_MULTI_RANK_GPU_ENABLE=1), rows "N ranks on K GPUs": replicas identical
#      (steps 04-06), steps 06 = 05, 07 = 06, 08 = 06 (bit-identical at 2 ranks, the same steps
#      above), step 05 one step on the GPUs from the CPU's state within float32 rounding; at 2 ranks the ncclAvg fallback and an IPv6 bootstrap; on a node of 2
#      or more GPUs, the probe's bus-bandwidth table over all of them;
#  5b. then, at 2 ranks (section 5's placement): step 06 with --comm_hook fp16, bf16 and powersgd
#      (replicas identical; PowerSGD's --trace well formed, its spans those of what ran), steps 06,
#      07 and 08 with --clip_grad_norm (bit-identical losses, norms and digests), and --check_finite
#      with a NaN injected on rank 1 (the job ends, naming rank 1);
#  5c. (NEVER RUN YET) step 09's live recovery over NCCL at 3 ranks, one killed: the others go on, and
#      end as a 2-rank --resume from the 3-rank run's step-3 checkpoint does (I2);
#   6. with BENCH=R: bench/gpu_bench.sh -r R, under the same deadline.
# Every run is bounded: `timeout` around it (RUN_LIMIT seconds, default 300, or what is left before
# the deadline), the trainer's --timeout 60 (its watchdog), and, where ranks share a GPU,
# NCCL_MAX_CTAS=2 (NCCL documents "up to 2 ranks per GPU" with its default resources and warns that
# running out of them hangs).
# The table: summary.txt in DDP_GPU_OUT, one row per check, "ok", "FAILED" or "SKIPPED" (a check this
# machine cannot run, or one the deadline left out), "## N." lines where a section starts, and a last
# line that says how it ended: complete, or stopped (by which signal, at what second, in which section
# and run). Exit status 1 when any row FAILED (a machine without a GPU: every GPU row fails), else 3
# when the deadline cut a run or left a section out (a partial table), else 0; 128 + the signal when
# stopped by one (SIGINT too when started in the background, where a shell ignores it: see below). The verdicts are in scripts/gpu/gpu_verdict.sh (tested on CPUs
# with made-up logs, and this script with a stand-in for the programs: tests/integration/).
#
# Usage: [DDP_GPU_DEADLINE=S] [DDP_GPU_OUT=...] [NCCL_ROOT=...] [BENCH=R] scripts/gpu/gpu_check.sh [BUILD_DIR]
#   BUILD_DIR        build folder (default build-gpu)
#   DDP_GPU_DEADLINE seconds from the start by which it must have ended, summary written: a section
#                    starts only while its share of S (in proportion to its estimated time, EST_*
#                    below) is left, else its rows say SKIPPED "deadline"; runs are cut at S. Unset:
#                    nothing is skipped
#   DDP_GPU_OUT      output folder (default BUILD_DIR/gpu_check): summary.txt (the table, written as
#                    it goes) and logs.tar.gz (every log and metrics file; while it runs, and after a
#                    SIGKILL, the logs are in DDP_GPU_OUT/logs/); nothing else
#   DDP_GPU_REUSE_BUILD=1  use BUILD_DIR as it is: no configure, no build (a build made before)
#   NCCL_ROOT        an NCCL install (include/nccl.h + lib/libnccl.so*), e.g. NCCL 2.30 unpacked;
#                    its lib/ is put first on LD_LIBRARY_PATH. Unset: on a node of one GPU,
#                    deps/nccl-*.tar.xz, when there, is unpacked into deps/nccl and used (several
#                    ranks on one GPU need NCCL >= 2.30); on a node of several GPUs the stock NCCL
#                    (the toolkit's or the wheel's) is preferred. The summary's "# NCCL chosen:" line
#                    says which
#   DEPS_DIR         the folder of carried dependencies (default deps), as for scripts/gpu/gpu_deps.sh
#   DDP_DEPS_PREFIX  Debian packages unpacked by scripts/gpu/gpu_deps.sh (OpenBLAS, GoogleTest,
#                    libdeflate) for a machine without them; deps/debs/*.deb are unpacked when present
#   CUDA_ARCHS       CUDA architectures to build (default 90: Hopper)
#   BENCH=R          then run bench/gpu_bench.sh -r R (needs PyTorch; its own build folder,
#                    BUILD_DIR-bench, with the same NCCL and CUDA_ARCHS)
#   RUN_LIMIT        seconds each run may take before `timeout` ends it (default 300)
# CUDA libraries may also come from PyTorch's pip wheels (nvidia-*): NCCL is taken from the wheel when
# neither NCCL_ROOT nor the toolkit has one.
set -uo pipefail
# A shell ignores SIGINT in a job it starts in the background (`gpu_check.sh &`), and bash cannot trap
# a signal ignored at its start: started so, it would not stop on `kill -INT`. Once, it starts itself
# again with SIGINT back to its default, so that the trap below has it.
if [ -z "${DDP_GPU_CHECK_SIGINT:-}" ] && [ "$(trap -p INT)" = "trap -- '' SIGINT" ] && command -v python3 > /dev/null; then
  export DDP_GPU_CHECK_SIGINT=1
  exec python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv("/bin/bash", ["bash"] + sys.argv[1:])' "$0" "$@"
fi
cd "$(dirname "$0")/../.." || exit 1
T0=$SECONDS
BUILD_DIR=${1:-build-gpu}
DDP_GPU_OUT=${DDP_GPU_OUT:-$BUILD_DIR/gpu_check}
DEADLINE=${DDP_GPU_DEADLINE:-}
if [ -n "$DEADLINE" ] && ! [[ $DEADLINE =~ ^[1-9][0-9]{0,6}$ ]]; then
  echo "gpu_check: DDP_GPU_DEADLINE must be a whole number of seconds (1..9999999), got '$DEADLINE'" >&2
  exit 2
fi
RESERVE=5  # seconds kept before the deadline: a run's 2 s to die, the last lines, the logs' archive
mkdir -p "$DDP_GPU_OUT" || exit 1
rm -rf "$DDP_GPU_OUT/logs" "$DDP_GPU_OUT/logs.tar.gz" "$DDP_GPU_OUT/summary.txt"
LOG=$DDP_GPU_OUT/logs
mkdir -p "$LOG" || exit 1
work=$(mktemp -d)  # data made here, checkpoints: not kept
. scripts/gpu/gpu_verdict.sh  # rows, ok/fail/skip, the verdict_* functions, tally
SUMMARY=$DDP_GPU_OUT/summary.txt
ECHO_ROWS=1

# ---- how it ends: complete, or stopped; either way the counts, then the logs packed ----------------
where="start-up"  # the section and run in progress, for a stopped run's last line
child=""          # the `timeout` process of the run in progress
finished=0
stop_child() {  # `timeout` passes the signal on to its whole process group (the run's processes)
  [ -n "$child" ] || return 0
  kill -TERM "$child" 2> /dev/null
  wait "$child" 2> /dev/null  # at most its -k grace
  child=""
}
finish() {  # LAST_LINE
  [ $finished -eq 0 ] || return 0
  finished=1
  trap '' INT TERM HUP
  stop_child
  {
    tally
    echo "# $1"
    echo "# logs in $DDP_GPU_OUT/logs.tar.gz"
  } >> "$SUMMARY"
  tar -czf "$DDP_GPU_OUT/logs.tar.gz" -C "$DDP_GPU_OUT" logs && rm -rf "$LOG"
  rm -rf "$work"
  echo
  cat "$SUMMARY"
}
elapsed() { echo $((SECONDS - T0)); }
on_signal() {  # NAME NUMBER
  finish "STOPPED by SIG$1 after $(elapsed) s, in $where; the rows above are those decided by then"
  exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP
trap 'finish "ended early (exit status $?) after $(elapsed) s, in $where"' EXIT

# ---- the deadline ------------------------------------------------------------------------------------
# Estimated seconds of each section on one H200 (16 cores): what the deadline is shared by. Estimates,
# not measurements (nothing has run on a GPU yet); section 5's is per world size.
EST_BUILD=90 EST_SMOKE=15 EST_GPU_TESTS=60 EST_STEP01=30 EST_WS1=60 EST_MULTI=45 EST_HOOKS=35 EST_LIVE=60
EST_BENCH=150
# the sum over the sections of this run (section 5's world sizes are added once CUDA has counted the
# GPUs; until then it counts one)
total_est=$((1 + EST_BUILD + EST_SMOKE + EST_GPU_TESTS + EST_STEP01 + EST_WS1 + EST_MULTI + EST_HOOKS + EST_LIVE))
[ "${BENCH:-0}" -gt 0 ] && total_est=$((total_est + EST_BENCH * BENCH))
left() {  # seconds left before the deadline, less the reserve (a large number without one)
  if [ -n "$DEADLINE" ]; then echo $((DEADLINE - $(elapsed) - RESERVE)); else echo 999999999; fi
}
deadline_why=""  # set once the deadline is reached: every later row is SKIPPED with it
section_skip=""  # set while a section runs that its share of the deadline left out
left_out=()      # the sections it left out
multi=""         # set while multi-rank rows are decided
mr_why=""        # set when the smoke test failed: multi-rank rows then FAIL with it, unrun
refresh_forced() {
  if [ -n "$multi" ] && [ -n "$mr_why" ]; then forced="FAILED"$'\t'"$mr_why"
  elif [ -n "$deadline_why" ]; then forced="SKIPPED"$'\t'"$deadline_why"
  elif [ -n "$section_skip" ]; then forced="SKIPPED"$'\t'"$section_skip"
  else forced=""
  fi
}
multi_rows() {  # on|off: the rows that follow are multi-rank ones
  if [ "$1" = on ]; then multi=1; else multi=""; fi
  refresh_forced
}
section_est=$EST_BUILD  # the estimate of the section in progress
section() {  # ID TITLE EST: a section starts, if its share of the deadline is left
  local l
  section_est=$3
  where="section $1 ($2), at $(elapsed) s"
  printf '## %s. %s (at %s s)\n' "$1" "$2" "$(elapsed)" | tee -a "$SUMMARY"
  section_skip=""
  l=$(left)
  if [ -n "$DEADLINE" ] && [ -z "$deadline_why" ] && ! section_may_start "$l" "$DEADLINE" "$3" "$total_est"; then
    section_skip="deadline: not started at $(elapsed) s of $DEADLINE (its share, ~$((DEADLINE * $3 / total_est)) s, was not left)"
    left_out+=("$1")
  fi
  refresh_forced
}

# A run: name, then the command (`launch N ...` for scripts/launch.sh); its output goes to
# $LOG/<nn>_<name>.log (last_log), its exit status to last_rc. True when it exited 0. Bounded by
# `timeout` (RUN_LIMIT, or LIMIT=seconds before the name, or what is left before the deadline: then
# a run cut at the deadline, and every later one, is SKIPPED "deadline", not a hang); run
# in the background and waited for, so that a signal is handled at once. Not run while rows are
# forced (true then: the rows that follow take the forced verdict).
n_run=0
run() {
  local limit=${RUN_LIMIT:-300} name l
  case $1 in LIMIT=*) limit=${1#LIMIT=}; shift ;; esac
  name=$1
  shift
  n_run=$((n_run + 1))
  last_log="$LOG/$(printf '%02d' $n_run)_$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log"
  last_rc=0
  [ -z "$forced" ] || { last_log=/dev/null; return 0; }
  l=$(left)
  if [ "$l" -lt 1 ]; then
    deadline_why="deadline: reached at $(elapsed) s of $DEADLINE; not run"
    refresh_forced
    last_log=/dev/null
    return 0
  fi
  [ "$l" -lt "$limit" ] && limit=$l
  if [ -n "$DEADLINE" ]; then  # one hang must not eat the sections after it
    local cap=$((2 * DEADLINE * section_est / total_est))
    [ "$cap" -lt 60 ] && cap=60
    [ "$cap" -lt "$limit" ] && limit=$cap
  fi
  [ "$1" = launch ] && { shift; launch_cmd "$@"; set -- "${cmd[@]}"; }
  where="${where%%, running *}, running $name (logs/${last_log##*/}) since $(elapsed) s"
  timeout -k 2 "$limit" "$@" < /dev/null > "$last_log" 2>&1 &
  child=$!
  wait "$child"
  last_rc=$?
  child=""
  where=${where%%, running *}
  [ $last_rc -eq 0 ] && return 0
  echo "exit status $last_rc" >> "$last_log"
  if { [ $last_rc -eq 124 ] || [ $last_rc -eq 137 ]; } && [ "$(left)" -lt 1 ]; then
    echo "stopped at the deadline (DDP_GPU_DEADLINE=$DEADLINE) after $limit s" >> "$last_log"
    deadline_why="deadline: reached at $(elapsed) s of $DEADLINE (${name} stopped)"
    refresh_forced
    last_rc=0
    return 0
  fi
  return 1
}
last_error() { first_error "$last_log"; }  # the first error line of the latest run's log

# A probe between the runs (nvidia-smi, nccl_caps.py, gpu_count, ncclGetVersion, a comparison): like
# run(), in the background and waited for, so that a signal is handled at once, and cut at the
# deadline (a wedged GPU hangs nvidia-smi and gpu_count in the driver). Its stdout in $probe_out, its
# stderr appended to logs/probes.log, its exit status returned: 124 or 137 when cut, 125 when no time
# was left to start it. Cut at the deadline, or not started, it ends the rows as run() does: every
# later row is SKIPPED "deadline".
probe() {  # LIMIT NAME COMMAND...
  local limit=$1 name=$2 l rc
  shift 2
  probe_out=""
  probe_limit=$limit
  l=$(left)
  [ "$l" -lt "$limit" ] && probe_limit=$l
  if [ "$probe_limit" -lt 1 ]; then
    deadline_why=${deadline_why:-"deadline: reached at $(elapsed) s of $DEADLINE; not run"}
    refresh_forced
    return 125
  fi
  where="${where%%, running *}, running $name (a probe) since $(elapsed) s"
  timeout -k 2 "$probe_limit" "$@" < /dev/null > "$work/probe.out" 2>> "$LOG/probes.log" &
  child=$!
  wait "$child"
  rc=$?
  child=""
  where=${where%%, running *}
  probe_out=$(cat "$work/probe.out")
  if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$(left)" -lt 1 ]; then
    echo "$name stopped at the deadline (DDP_GPU_DEADLINE=$DEADLINE) after $probe_limit s" >> "$LOG/probes.log"
    deadline_why=${deadline_why:-"deadline: reached at $(elapsed) s of $DEADLINE ($name stopped)"}
    refresh_forced
  fi
  return $rc
}

# launch_cmd N [VAR=VALUE | -u VAR]... PROGRAM ARGS...: cmd=(scripts/launch.sh on a fresh pair of ports
# (MASTER_PORT, + 1), with those variables set or unset)
export MASTER_ADDR=127.0.0.1
port=29512
launch_cmd() {
  local n=$1 unset=() set=()
  shift
  while [ $# -gt 0 ]; do
    case $1 in -u) unset+=(-u "$2"); shift 2 ;; [A-Z]*=*) set+=("$1"); shift ;; *) break ;; esac
  done
  cmd=(env "${unset[@]}" MASTER_PORT="$port" "${set[@]}" scripts/launch.sh -n "$n" "$@")
  port=$((port + 2))
}
# The variables of N ranks on K GPUs: several ranks on one GPU need NCCL >= 2.30 told so, and at most
# 2 CTAs each; ranks on GPUs of their own must not have NCCL_MULTI_RANK_GPU_ENABLE (it would limit
# them too).
placement() {  # N K: sets place=(...)
  if [ "$1" -gt "$2" ]; then place=(NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=2 CUDA_VISIBLE_DEVICES=0)
  else place=(-u NCCL_MULTI_RANK_GPU_ENABLE)
  fi
}

wheel_dir() {  # the first site-packages/nvidia/<name> folder, if any
  python3 - "$1" 2>/dev/null <<'PY'
import os, site, sys
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    d = os.path.join(sp, "nvidia", sys.argv[1])
    if os.path.isdir(d):
        print(d)
        break
PY
}

# ---- 0. the GPU and the NCCL it will load ------------------------------------------------------------
# nvidia-smi first, bounded like every run: a wedged GPU or driver hangs it, and then nothing else
# asks it again (its row FAILED "hung"). 20 s, or what is left before the deadline.
where="section 0 (the GPU), at $(elapsed) s"
smi_rc=0
probe 20 nvidia-smi nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || smi_rc=$?
gpu_name=$(head -1 <<< "$probe_out")
smi_hung=""
case $smi_rc in
  124 | 137) smi_hung="did not answer in $probe_limit s (hung: a wedged GPU or driver?); not asked again" ;;
  125) smi_hung="not asked: no time left before the deadline" ;;
esac
smi_gpus=0
{
  echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ): ${gpu_name:-${smi_hung:+nvidia-smi }${smi_hung:-no GPU}}; build $BUILD_DIR;" \
       "deadline ${DEADLINE:-none}${DEADLINE:+ s}"
  printf '%-52s %s\n' "check" "result"
} | tee "$SUMMARY"
section 0 "the GPU and the NCCL it will load" 1
if [ -n "$smi_hung" ]; then
  echo "nvidia-smi $smi_hung" > "$LOG/nvidia-smi.txt"
  # hung, it is this machine's failure, not the deadline's: FAILED even when the deadline cut it
  [ "$smi_rc" -eq 125 ] || forced=""
  fail "nvidia-smi" "$smi_hung"
  refresh_forced
else
  for a in "" "topo -m"; do
    # shellcheck disable=SC2086  # the arguments, split
    probe 20 nvidia-smi nvidia-smi $a
    printf '%s\n' "$probe_out"
  done > "$LOG/nvidia-smi.txt" 2>&1
  probe 20 nvidia-smi nvidia-smi -L
  smi_gpus=$(grep -c '^GPU' <<< "$probe_out")
fi
if [ -n "$smi_hung" ]; then
  :
elif [ -n "$gpu_name" ]; then
  ok "nvidia-smi" "$smi_gpus GPU(s): $gpu_name"
else
  fail "nvidia-smi" "no GPU listed (nvidia-smi missing or failing; see logs/nvidia-smi.txt)"
fi

nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc"
            -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" -DDDP_FETCH_GTEST=OFF)
command -v mpicc > /dev/null || cmake_args+=(-DDDP_ENABLE_MPI=OFF)
command -v ninja > /dev/null && [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && cmake_args+=(-G Ninja)
# Which NCCL. NCCL_ROOT when set. Else, on a node of several GPUs (nvidia-smi -L), the stock one (the
# toolkit's, else PyTorch's wheel): one rank per GPU is what jobs there run, and the stock library
# what they load, so it is the better test. Else an NCCL >= 2.30 carried in deps/ (an ignored folder,
# DEPS_DIR as for scripts/gpu/gpu_deps.sh: nccl-*.tar.xz, unpacked into deps/nccl/): it runs several ranks
# on one GPU, which the stock 2.28 refuses. Else the stock one. The summary says which, and why.
DEPS=${DEPS_DIR:-deps}
stock_nccl() {  # the toolkit's NCCL (found by CMake as it is), else the wheel's folder
  if [ -f /usr/local/cuda/include/nccl.h ]; then echo /usr/local/cuda; else wheel_dir nccl; fi
}
if [ -n "${NCCL_ROOT:-}" ]; then
  nccl_choice="NCCL_ROOT=$NCCL_ROOT, as set"
else
  tarball=$(ls "$DEPS"/nccl-*.tar.xz 2> /dev/null | tail -n 1)
  stock=$(stock_nccl)
  carried=""
  { [ -n "$tarball" ] || [ -f "$DEPS/nccl/include/nccl.h" ]; } && carried=1
  if [ -n "$carried" ] && [ "$smi_gpus" -ge 2 ] && [ -n "$stock" ]; then
    nccl_choice="the stock NCCL ($stock): $smi_gpus GPUs, one rank each; the NCCL carried in $DEPS/ (for several ranks on one GPU) not used"
    [ "$stock" = /usr/local/cuda ] || export NCCL_ROOT=$stock
  else
    if [ -n "$tarball" ] && [ ! -f "$DEPS/nccl/include/nccl.h" ]; then
      mkdir -p "$DEPS/nccl" && probe 120 nccl_unpack tar -xJf "$tarball" -C "$DEPS/nccl"
      printf '%s\n' "$probe_out" > "$LOG/nccl_unpack.log"
    fi
    if [ -f "$DEPS/nccl/include/nccl.h" ]; then
      export NCCL_ROOT
      NCCL_ROOT=$(cd "$DEPS/nccl" && pwd)
      nccl_choice="the NCCL carried in $DEPS/nccl ($smi_gpus GPU(s) listed: several ranks share a GPU)"
    elif [ -n "$stock" ]; then
      nccl_choice="the stock NCCL ($stock)"
      [ "$stock" = /usr/local/cuda ] || export NCCL_ROOT=$stock
    else
      nccl_choice="none found (no NCCL_ROOT, $DEPS/nccl, toolkit or wheel NCCL): CMake looks in its own places"
    fi
  fi
fi
printf '# NCCL chosen: %s\n' "$nccl_choice" | tee -a "$SUMMARY"
if [ -n "${NCCL_ROOT:-}" ]; then
  cmake_args+=(-DNCCL_ROOT="$NCCL_ROOT")
  for d in "$NCCL_ROOT/lib" "$NCCL_ROOT/lib64"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
fi
if [ -z "${DDP_DEPS_PREFIX:-}" ] && compgen -G "$DEPS/debs/*.deb" > /dev/null; then
  DEPS_DIR=$DEPS scripts/gpu/gpu_deps.sh --unpack > "$LOG/gpu_deps.log" 2>&1 && DDP_DEPS_PREFIX=$(cd "$DEPS/prefix" && pwd)
fi
if [ -n "${DDP_DEPS_PREFIX:-}" ]; then
  P=$DDP_DEPS_PREFIX/usr
  L=$P/lib/x86_64-linux-gnu
  # libdeflate (header, link, libdeflate.so.0) comes from the prefix too: LIBDEFLATE_ROOT makes CMake
  # take them all from there, and $L on LD_LIBRARY_PATH (besides the build tree's RUNPATH) lets every
  # program, test and mpirun rank load it
  cmake_args+=(-DCMAKE_PREFIX_PATH="$P" -DCMAKE_LIBRARY_PATH="$L/openblas-pthread")
  [ -f "$P/include/libdeflate.h" ] && cmake_args+=(-DLIBDEFLATE_ROOT="$P")
  export LD_LIBRARY_PATH="$L/openblas-pthread:$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# The library the programs will load, in the dynamic loader's order: LD_LIBRARY_PATH, then the
# folder the build links from (its RUNPATH), then ldconfig's cache. After the build, ldd says which
# one was loaded, and the row is checked again if that is another.
nccl_to_load() {
  local d
  local IFS=:
  for d in ${LD_LIBRARY_PATH:-} "${NCCL_ROOT:-/usr/local/cuda}/lib" "${NCCL_ROOT:-/usr/local/cuda}/lib64"; do
    [ -f "$d/libnccl.so.2" ] && { echo "$d/libnccl.so.2"; return; }
  done
  /sbin/ldconfig -p 2> /dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}'
}
caps_row() {  # NAME LIB: the row "NCCL carries every collective the code calls"
  local line="" rc=2
  [ -n "$2" ] && { probe 60 nccl_caps scripts/gpu/nccl_caps.py "$2"; rc=$?; line=$probe_out; }
  caps_lib=$2
  verdict "$1" "$(verdict_caps "$2" $rc "$line")"
}
caps_row "NCCL carries every collective the code calls" "$(nccl_to_load)"

# ---- 1. build ------------------------------------------------------------------------------------------
section 1 "configure and build" $EST_BUILD
built=0
if [ "${DDP_GPU_REUSE_BUILD:-0}" = 1 ]; then
  if [ -d "$BUILD_DIR/bin" ]; then
    ok "configure + build" "reused $BUILD_DIR as it is (DDP_GPU_REUSE_BUILD=1): not configured, not built"
    built=1
  else
    fail "configure + build" "DDP_GPU_REUSE_BUILD=1, but $BUILD_DIR/bin does not exist"
  fi
elif [ -z "$nvcc" ]; then
  fail "configure + build" "no nvcc (CUDA toolkit) found"
elif ! run LIMIT=900 configure cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"; then
  fail "configure + build" "configure failed: $(grep -m1 -A2 'CMake Error' "$last_log" | tr '\n' ' ')"
elif [ -n "$forced" ]; then
  skip "configure + build" "not finished"  # takes the forced verdict: the deadline
else
  features=$(grep -oE '\[(✓|✗)\] [A-Za-z+ ]+' "$last_log" | sed 's/ *$//' | paste -sd, -)
  configure_log=$last_log
  # only what this script runs: the steps, gpu_count, the probe, the gpu tests' programs
  targets=(01_single_gpu 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero 08_fsdp 09_live lighthouse gpu_count probe
           test_order_nccl test_dist_gpu)
  grep -q '\[✓\] GoogleTest' "$configure_log" && targets+=(gpu_tests)
  t_build=$SECONDS
  if ! grep -q '\[✓\] CUDA' "$configure_log" || ! grep -q '\[✓\] NCCL' "$configure_log"; then
    fail "configure + build" "no CUDA or no NCCL in the build (set NCCL_ROOT): $features"
  elif ! run LIMIT=1800 build cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"; then
    fail "configure + build" "build failed: $(grep -m1 -E 'error' "$last_log")"
  elif [ -n "$forced" ]; then
    skip "configure + build" "not finished"
  else
    ok "configure + build" "built in $((SECONDS - t_build)) s; $features"
    built=1
  fi
fi
if [ $built -eq 0 ]; then
  if [ -z "$forced" ]; then
    finish "ended after $(elapsed) s: no build, nothing else to check"
    exit 1
  fi
  # the deadline stopped the build, or left no time to start it: every later row says so
  deadline_why=${deadline_why:-"deadline: no build (its share of the deadline was not left)"}
  refresh_forced
fi
BIN=$BUILD_DIR/bin

# the NCCL linked (the nccl.h the build compiled against, and the library it linked) and loaded
nccl_inc=$(sed -n 's/^NCCL_INCLUDE_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2> /dev/null)
nccl_lib=$(sed -n 's/^NCCL_LIBRARY:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2> /dev/null)
linked="$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) / {v = v (v ? "." : "") $3} END {print v}' \
          "$nccl_inc/nccl.h" 2>/dev/null) ($nccl_lib)"
loaded_path=$(ldd "$BIN/05_metrics_ckpt" 2>/dev/null | awk '/libnccl/ {print $3; exit}')
if [ -n "$loaded_path" ] && [ "$(readlink -f "$loaded_path")" != "$(readlink -f "${caps_lib:-/}")" ]; then
  caps_row "NCCL that loads carries every collective" "$loaded_path"  # not the one predicted above
fi
loaded=""
[ -n "$loaded_path" ] && probe 20 ncclGetVersion python3 -c '
import ctypes, sys
v = ctypes.c_int(0)
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v))
c = v.value
print(f"{c // 10000}.{c % 10000 // 100}.{c % 100}" if c >= 10000 else f"{c // 1000}.{c % 1000 // 100}.{c % 100}")
' "$loaded_path" && loaded=$probe_out
nccl_code=0
if [ -z "$loaded" ]; then
  fail "NCCL linked / loaded" "linked $linked; the loaded library (${loaded_path:-none}) did not answer ncclGetVersion"
else
  IFS=. read -r ma mi pa <<< "$loaded"
  nccl_code=$((ma * 10000 + mi * 100 + pa))
  if [[ "$linked" == "$loaded "* ]]; then
    ok "NCCL linked / loaded" "linked $linked; loaded $loaded ($loaded_path)"
  else
    fail "NCCL linked / loaded" "header and library differ: linked $linked; loaded $loaded ($loaded_path)"
  fi
fi
probe 30 gpu_count "$BIN/gpu_count" && ngpu=$probe_out || ngpu=0
[[ $ngpu =~ ^[0-9]+$ ]] || ngpu=0
if [ "$ngpu" -gt 0 ]; then
  ok "GPU visible to CUDA" "$ngpu: ${gpu_name:-(nvidia-smi names none)}"
else
  fail "GPU visible to CUDA" "cudaGetDeviceCount finds none (nvidia-smi: ${gpu_name:-not found})"
fi
plan=$(multi_rank_plan "$ngpu" "$nccl_code")
n_np=$(grep -c . <<< "$plan")
[ "$n_np" -gt 1 ] && total_est=$((total_est + EST_MULTI * (n_np - 1)))

# ---- 1b. multi-rank NCCL, bounded: the probe at 2 ranks ---------------------------------------------------
section 1b "smoke test: multi-rank NCCL (the probe, 2 ranks)" $EST_SMOKE
smoke="NCCL smoke test: probe, 2 ranks"
if [ "$ngpu" -eq 1 ] && [ "$nccl_code" -lt 23000 ]; then
  skip "$smoke" "2 ranks need 2 GPUs, or NCCL >= 2.30 to share one (loaded ${loaded:-unknown})"
else
  if [ "$ngpu" -ge 2 ]; then k=2; else k=1; fi
  placement 2 $k
  # NCCL's INFO and WARN lines to files of their own, which NCCL line-buffers: on stdout they wait in
  # a block buffer that a watchdog's _exit or timeout's SIGKILL throws away (a hang's explanation
  # with it), and a rank's partial block could split the probe's own lines. Appended to the log after.
  nccl_files="$LOG/probe_smoke_nccl"
  run LIMIT=45 probe_smoke launch 2 "${place[@]}" NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$nccl_files.%h.%p.txt" \
    "$BIN/probe" --device cuda --backend nccl --timeout 30 --max_bytes 1M
  smoke_rc=$last_rc
  for f in "$nccl_files".*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; } >> "$last_log"; done
  verdict "$smoke" "$(verdict_probe "$smoke_rc" "$last_log" 2)"
  if [ "${rows[-1]}" != "${rows[-1]/ FAILED: /}" ]; then
    mr_why="multi-rank NCCL does not work here (the 2-rank probe failed: logs/${last_log##*/}); not run"
  fi
fi

# ---- 2. the gpu tests ----------------------------------------------------------------------------------
section 2 "the gpu tests (ctest -L gpu)" $EST_GPU_TESTS
# --timeout: the tests without their own TIMEOUT (GoogleTest's); the NCCL ones have 60 s, their
# process group's watchdog 45 s. Without multi-rank NCCL, the multi-rank tests are not run.
excl=()
[ -n "$mr_why" ] && excl=(-E '^(nccl_bucket_order|dist_gpu_.*)$')
run LIMIT=600 ctest_gpu ctest --test-dir "$BUILD_DIR" -L gpu --timeout 60 "${excl[@]}" --output-on-failure
ctest_log=$last_log
[ -f "$ctest_log" ] || : > "$ctest_log"
verdict "gpu tests (CUDA vs CPU, every op; MLP)" "$(verdict_gpu_tests "$ctest_log")"
multi_rows on
verdict "bucket all-reduce order, 2 ranks (gpu test)" "$(verdict_order "$ctest_log" "$ngpu")"
verdict "reduce-scatter, all-gather in place (gpu tests)" "$(verdict_dist "$ctest_log" "$ngpu")"
multi_rows off

# ---- 3. step 01, GPU against CPU ---------------------------------------------------------------------
section 3 "step 01 on the GPU against the CPU" $EST_STEP01
# Real Fashion-MNIST when installed; otherwise IDX files made here (learnable: each class lights its
# own rows of the image), so that the 8-bit pixel path (ops_gather_pixels) runs on the GPU as well.
data=()
data_name="Fashion-MNIST"
fmnist=$(sed -n 's/^DDP_FASHION_MNIST_DIR:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2> /dev/null)  # the build's
if [ ! -f "$fmnist/train-images-idx3-ubyte.gz" ]; then
  data_name="IDX files made here"
  cat > "$work/make_idx.py" <<'PY'
import gzip, os, random, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(1337)
for split, n in (("train", 16384), ("t10k", 2000)):
    labels = [i % 10 for i in range(n)]
    noise = rng.randbytes(784 * n)
    pixels = bytearray(noise.translate(bytes(b % 200 for b in range(256))))  # each byte % 200
    plus30 = bytes(min(255, b + 30) for b in range(256))
    for i, k in enumerate(labels):  # the rows 2k+4 and 2k+5 of the image, 30 brighter
        a, b = 784 * i + 28 * (2 * k + 4), 784 * i + 28 * (2 * k + 6)
        pixels[a:b] = pixels[a:b].translate(plus30)
    with gzip.open(f"{out}/{split}-images-idx3-ubyte.gz", "wb", compresslevel=1) as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
    with gzip.open(f"{out}/{split}-labels-idx1-ubyte.gz", "wb", compresslevel=1) as f:
        f.write(struct.pack(">II", 2049, n) + bytes(labels))
PY
  run make_idx python3 "$work/make_idx.py" "$work/idx" || fail "IDX files made here" "$(last_error)"
  data=(--data fashion-mnist --data_dir "$work/idx")
fi
# A comparison of two runs' metrics files (scripts/gpu/gpu_compare.py): one row; not run while forced.
compare() {
  if [ -n "$forced" ]; then ok "$1" "-"; return; fi
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" probe 60 gpu_compare python3 scripts/gpu/gpu_compare.py "${@:2}"
  verdict "$1" "$probe_out"
}
# hidden 256,256: the CPU side may be the plain C GEMM (no OpenBLAS), which must stay quick
s01=(--epochs 1 --max_steps 200 --batch_size 128 --hidden 256,256 --save_interval 0 --log_interval 100 "${data[@]}")
for dev in cuda cpu; do
  run "step01_$dev" "$BIN/01_single_gpu" --device $dev "${s01[@]}" --metrics "$LOG/step01_$dev.jsonl" ||
    fail "step 01 on $dev ($data_name)" "$(last_error)"
done
# GPU against CPU: two summation orders, so their values are compared one step from the same state
# (the next row); here only the steps they log (structure), with the losses shown
compare "step 01 on GPU and CPU: the same steps ($data_name)" steps "$LOG/step01_cuda.jsonl" "$LOG/step01_cpu.jsonl" 10
# One step from the same state (the CPU's initial parameters, resumed on the GPU): two summation
# orders, which one step does not amplify, within the tests' float32 error model (tests/harness/parity.py): sums of
# 128 samples and the 784 inputs of layer 0 (the trajectories above part after a few steps anyway).
one=(--lr 0.05 --momentum 0.9 --max_steps 1 --save_interval 1000)
run "step01_one_cpu" "$BIN/01_single_gpu" --device cpu "${s01[@]}" "${one[@]}" --save_init "$work/one_init" \
  --ckpt_dir "$work/one_cpu" --metrics "$LOG/one_cpu.jsonl" || fail "step 01 on cpu, one step" "$(last_error)"
run "step01_one_cuda" "$BIN/01_single_gpu" --device cuda "${s01[@]}" "${one[@]}" \
  --resume "$work/one_init/checkpoint.bin" --ckpt_dir "$work/one_cuda" --metrics "$LOG/one_cuda.jsonl" ||
  fail "step 01 on cuda, one step" "$(last_error)"
compare "step 01: one step on the GPU from the CPU's state, within float32 rounding" one_step \
  "$work/one_init/checkpoint.bin" "$work/one_cpu/checkpoint.bin" "$LOG/one_cpu.jsonl" \
  "$work/one_cuda/checkpoint.bin" "$LOG/one_cuda.jsonl" 0.05 0.9 912
run "step01_tf32" "$BIN/01_single_gpu" --device cuda --tf32 "${s01[@]}" --metrics "$LOG/step01_tf32.jsonl" ||
  fail "step 01 on cuda --tf32" "$(last_error)"
# TF32 rounds each GEMM input to 10 mantissa bits (2^-11 relative): another arithmetic, whose values
# no stated error model bounds here: the same steps as fp32, the losses shown, not judged
compare "step 01 --tf32 on the GPU: the same steps as fp32" steps "$LOG/step01_tf32.jsonl" "$LOG/step01_cuda.jsonl" 10

# ---- 4. the process group over NCCL, world size 1 ---------------------------------------------------
section 4 "the process group over NCCL, world size 1" $EST_WS1
small=(--device cuda --backend nccl --data synthetic --dataset_size 16384 --log_interval 100 --timeout 60)
run "step05_2epochs" launch 1 "$BIN/05_metrics_ckpt" "${small[@]}" --epochs 2 --save_interval 0 \
  --metrics "$LOG/s05a_{rank}.jsonl" || fail "step 05, 1 rank, 2 epochs" "$(last_error)"
run "step05_1epoch" launch 1 "$BIN/05_metrics_ckpt" "${small[@]}" --epochs 1 --save_interval 1 \
  --ckpt_dir "$work/ck05" --metrics "$LOG/s05b_{rank}.jsonl" || fail "step 05, 1 rank, 1 epoch" "$(last_error)"
run "step05_resumed" launch 1 "$BIN/05_metrics_ckpt" "${small[@]}" --epochs 2 --save_interval 0 \
  --resume "$work/ck05/checkpoint.bin" --metrics "$LOG/s05c_{rank}.jsonl" ||
  fail "step 05, 1 rank, resumed" "$(last_error)"
compare "step 05, 1 rank: resume is exact" digest "$LOG/s05a_0.jsonl" "$LOG/s05c_0.jsonl"
run "step06_1rank" launch 1 "$BIN/06_full" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --metrics "$LOG/s06_{rank}.jsonl" || fail "step 06, 1 rank" "$(last_error)"
# world size 1: step 06 (buckets, a sum, losses read back asynchronously) trains exactly as step 05
compare "step 06 = step 05, 1 rank" same "$LOG/s05b_0.jsonl" "$LOG/s06_0.jsonl"
# step 07 (ZeRO-1) at world size 1 on NCCL: its reduce-scatter and all-gather of one rank, so the
# newest GPU code runs even where only an NCCL that cannot share a GPU (< 2.30) loads
run "step07_1rank" launch 1 "$BIN/07_zero" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --metrics "$LOG/s07_{rank}.jsonl" || fail "step 07, 1 rank" "$(last_error)"
compare "step 07 = step 06, 1 rank" same "$LOG/s06_0.jsonl" "$LOG/s07_0.jsonl"
# step 08 (FSDP) at world size 1: every layer's all-gather and reduce-scatter of one rank, prefetched
run "step08_1rank" launch 1 "$BIN/08_fsdp" "${small[@]}" --epochs 1 --save_interval 0 \
  --metrics "$LOG/s08_{rank}.jsonl" || fail "step 08, 1 rank" "$(last_error)"
compare "step 08 = step 06, 1 rank" same "$LOG/s06_0.jsonl" "$LOG/s08_0.jsonl"
run "step06_trace" launch 1 "$BIN/06_full" "${small[@]}" --epochs 1 --bucket_cap_mb 1 --save_interval 0 \
  --max_steps 30 --trace "$LOG/trace06_{rank}.json" || fail "step 06, 1 rank, --trace" "$(last_error)"
compare "step 06 --trace: backward and all-reduce spans" trace "$LOG/trace06_0.json"
if command -v torchrun > /dev/null; then
  if run "step06_torchrun" torchrun --nproc_per_node 1 --master_port $port --redirects 3 --tee 3 \
       --no_python "$BIN/06_full" "${small[@]}" --epochs 1 --max_steps 30 --save_interval 0; then
    ok "step 06 under torchrun, 1 rank" "$(grep -h 'done:' "$last_log" | tail -1)"
  else
    fail "step 06 under torchrun, 1 rank" "$(last_error)"
  fi
  port=$((port + 2))
else
  skip "step 06 under torchrun, 1 rank" "no torchrun here"
fi
# Two ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE: every NCCL refuses them (< 2.30 always,
# >= 2.30 without the variable), so this runs wherever there is a GPU, and must end with our
# message, not hang.
refusal_rc=0
refusal_log=/dev/null
if [ "$ngpu" -gt 0 ]; then
  run "duplicate_gpu" launch 2 -u NCCL_MULTI_RANK_GPU_ENABLE CUDA_VISIBLE_DEVICES=0 "$BIN/05_metrics_ckpt" \
    --device cuda --backend nccl --data synthetic --dataset_size 8192 --max_steps 5 --timeout 60
  refusal_rc=$last_rc
  refusal_log=$last_log
fi
if [ -n "$forced" ]; then skip "2 ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE" "-"
else
  verdict "2 ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE" \
    "$(verdict_refusal "$ngpu" "$refusal_rc" "$refusal_log")"
fi

# ---- 5. several ranks: 2, 4 and every GPU of the node ------------------------------------------------
section 5 "several ranks: np in {2, 4, GPUs}" $((EST_MULTI * (n_np > 0 ? n_np : 1)))
multi_rows on
if [ -z "$plan" ]; then
  skip "several ranks (steps 04-08)" "needs NCCL >= 2.30 loaded or 2 or more GPUs ($ngpu GPU(s), NCCL ${loaded:-unknown})"
fi
# 1 epoch of 8192 synthetic samples, batch 64 per rank, hidden 256,256: 8192 / (64 np) steps. The CPU
# reference is step 01 with the global batch 64 np (steps 04-06 train exactly as it does,
# tests/harness/families.py matches_baseline); several CPU ranks would need MPI. --timeout 60: the
# trainer's watchdog ends a rank stuck in a collective (`timeout` ends the rest).
mr=(--data synthetic --dataset_size 8192 --epochs 1 --batch_size 64 --hidden 256,256 --save_interval 0
    --log_interval 1000)
nccl=(--device cuda --backend nccl --timeout 60)
ipv6=$(ipv6_bindable)
while read -r np k; do  # smallest world size first
  [ -n "$np" ] || continue
  on=$(ranks_on "$np" "$k")
  placement "$np" "$k"
  run "cpu_ref_np$np" "$BIN/01_single_gpu" --device cpu "${mr[@]}" --batch_size $((64 * np)) \
    --metrics "$LOG/ref$np.jsonl" || fail "CPU reference for $np ranks (step 01, batch $((64 * np)))" "$(last_error)"
  for s in 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero 08_fsdp; do
    n=${s%%_*}
    if ! run "step${n}_np$np" launch "$np" "${place[@]}" "$BIN/$s" "${nccl[@]}" "${mr[@]}" \
           --metrics "$LOG/m${n}_np${np}_{rank}.jsonl"; then
      verdict "step $n, $on" "$(verdict_run "$last_rc" "$last_log" "")"
      continue
    fi
    replicas_row "$n" || continue  # 07, 08: identical by construction; checked as "= step 06" below
    if [ -n "$forced" ]; then compare "step $n, $on: replicas identical"; continue; fi
    line=$(python3 scripts/gpu/gpu_compare.py replicas "$LOG/m${n}_np${np}_" "$np")
    # step 06 also says its GEMM rate against the peak: the ranks' sum where they share a GPU
    [ "$n" = 06 ] && line="$line; $(python3 scripts/gpu/gpu_compare.py mfu "$LOG/m${n}_np${np}_" "$np" "$k")"
    verdict "step $n, $on: replicas identical" "$line"
  done
  # step 06 = step 05: at 2 ranks a sum of two values has one order, so bit-identical; above, the
  # order NCCL sums in may differ between step 05's per-tensor calls and step 06's buckets: then
  # only the steps are compared (structure; the CPU tests prove 3 and 4 ranks one step from the same
  # state within the error model, tests/integration: step06_matches_step04_np3, ..._np4).
  cmp_how() { if [ "$np" -eq 2 ]; then compare "$1" same "$2" "$3"; else compare "$1 (the same steps)" steps "$2" "$3" 1; fi; }
  cmp_how "step 06 = step 05, $on" "$LOG/m05_np${np}_0.jsonl" "$LOG/m06_np${np}_0.jsonl"
  # step 07 (ZeRO-1: reduce-scatter, shard update, all-gather; 269,322 parameters, padded above 2)
  cmp_how "step 07 = step 06, $on" "$LOG/m06_np${np}_0.jsonl" "$LOG/m07_np${np}_0.jsonl"
  # step 08 (FSDP: each layer gathered, its gradient reduce-scattered)
  cmp_how "step 08 = step 06, $on" "$LOG/m06_np${np}_0.jsonl" "$LOG/m08_np${np}_0.jsonl"
  for n in 05 06; do  # the global loss (all-reduced) is logged from step 05 on; values: one step below
    compare "step $n, $on, and step 01 on the CPU (batch $((64 * np))): the same steps" steps \
      "$LOG/m${n}_np${np}_0.jsonl" "$LOG/ref$np.jsonl" 10
  done
  # One step from the same state: step 05 on the GPUs at np ranks resumes the CPU's initial state
  # (step 01, batch 64 np) and takes one step: 64 np samples summed in other orders, the error model
  run "cpu_one_np$np" "$BIN/01_single_gpu" --device cpu "${mr[@]}" --batch_size $((64 * np)) "${one[@]}" \
    --save_init "$work/one_init$np" --ckpt_dir "$work/one_cpu$np" --metrics "$LOG/one_cpu$np.jsonl" ||
    fail "step 01 on cpu, one step, batch $((64 * np))" "$(last_error)"
  run "step05_one_np$np" launch "$np" "${place[@]}" "$BIN/05_metrics_ckpt" "${nccl[@]}" "${mr[@]}" "${one[@]}" \
    --resume "$work/one_init$np/checkpoint.bin" --ckpt_dir "$work/one_gpu$np" --metrics "$LOG/one_gpu${np}_{rank}.jsonl" ||
    fail "step 05, $on, one step" "$(last_error)"
  compare "step 05, $on: one step from the CPU's state, within float32 rounding" one_step \
    "$work/one_init$np/checkpoint.bin" "$work/one_cpu$np/checkpoint.bin" "$LOG/one_cpu$np.jsonl" \
    "$work/one_gpu$np/checkpoint.bin" "$LOG/one_gpu${np}_0.jsonl" 0.05 0.9 $((64 * np + 784 + np))
  if [ "$np" -eq 2 ]; then
    # DIST_AVG without ncclAvg (NCCL < 2.10): a sum, then a division on the stream, inside the group
    run "step05_no_avg" launch 2 "${place[@]}" DDP_NCCL_NO_AVG=1 "$BIN/05_metrics_ckpt" "${nccl[@]}" "${mr[@]}" \
      --metrics "$LOG/noavg_{rank}.jsonl" || fail "step 05, $on, sum + divide (no ncclAvg)" "$(last_error)"
    # at 2 ranks both halve exactly (a power of two): the same bits
    compare "step 05, $on, sum + divide = ncclAvg" same "$LOG/m05_np2_0.jsonl" "$LOG/noavg_0.jsonl"
    # NCCL's bootstrap over an IPv6 literal (NCCL_COMM_ID=[::1]:port)
    ipv6_rc=0
    ipv6_log=/dev/null
    if [ "$ipv6" -eq 1 ]; then
      run "step05_ipv6" launch 2 "${place[@]}" MASTER_ADDR=::1 "$BIN/05_metrics_ckpt" "${nccl[@]}" "${mr[@]}" \
        --max_steps 5
      ipv6_rc=$last_rc
      ipv6_log=$last_log
    fi
    if [ -n "$forced" ]; then skip "bootstrap on MASTER_ADDR=::1, $on" "-"
    else verdict "bootstrap on MASTER_ADDR=::1, $on" "$(verdict_ipv6 "$ipv6" "$ipv6_rc" "$ipv6_log")"
    fi
  fi
  if [ "$np" -eq "$ngpu" ] && [ "$np" -eq "$k" ]; then
    # the whole node: the probe's table, 1 KiB to 256 MiB (nccl-tests' columns, busbw)
    run "probe_np$np" launch "$np" "${place[@]}" "$BIN/probe" --device cuda --backend nccl --timeout 60
    verdict "probe, $on: bus bandwidth" "$(verdict_probe "$last_rc" "$last_log" "$np")"
  fi
done <<< "$plan"

# ---- 5b. step 06's hooks, clipping in 06-08, --check_finite: 2 ranks -----------------------------------
# What step 06 adds beyond the course (docs/hooks_and_clipping.md), on NCCL: section 5's 2-rank
# placement and runs, each changed by one flag. A 16-bit all-reduce that sums nothing, or a hook that
# skips a bucket, leaves the replicas apart; a trace on events the hook never recorded has spans of no
# elements before the trace's start.
section 5b "hooks, clipping and the finite check, 2 ranks" $EST_HOOKS
k2=$(awk '$1 == 2 {print $2}' <<< "$plan")
if [ -z "$k2" ]; then
  skip "hooks, clipping, --check_finite (2 ranks)" "needs NCCL >= 2.30 loaded or 2 or more GPUs ($ngpu GPU(s), NCCL ${loaded:-unknown})"
else
  on=$(ranks_on 2 "$k2")
  placement 2 "$k2"
  two() {  # NAME ROW ARGS...: step 06 (or ARGS' program) at 2 ranks; a row only when the run fails
    run "$1" launch 2 "${place[@]}" "${@:3}" || verdict "$2" "$(verdict_run "$last_rc" "$last_log" "")"
  }
  # the 16-bit hooks: the bucket cast and divided, summed by NCCL in fp16 or bf16 (their canary at
  # set-up ends the job where the library does not sum the type)
  for h in fp16 bf16; do
    two "step06_${h}_np2" "step 06 --comm_hook $h, $on" "$BIN/06_full" "${nccl[@]}" "${mr[@]}" --comm_hook $h \
      --metrics "$LOG/h${h}_np2_{rank}.jsonl"
    compare "step 06 --comm_hook $h, $on: replicas identical" replicas "$LOG/h${h}_np2_" 2
  done
  # PowerSGD compressing from iteration 3 (its factors all-reduced, error feedback on), traced: the
  # trace's spans must be those of what ran (issue 40, V3)
  two "step06_powersgd_np2" "step 06 --comm_hook powersgd, $on" "$BIN/06_full" "${nccl[@]}" "${mr[@]}" \
    --comm_hook powersgd --powersgd_start_iter 3 --metrics "$LOG/hpsgd_np2_{rank}.jsonl" \
    --trace "$LOG/trace_psgd_np2_{rank}.json"
  compare "step 06 --comm_hook powersgd, $on: replicas identical" replicas "$LOG/hpsgd_np2_" 2
  compare "step 06 --comm_hook powersgd --trace, $on: its spans" hook_trace "$LOG/trace_psgd_np2_0.json" powersgd
  # --clip_grad_norm in 06, 07 and 08: at 2 ranks every sum of two terms has one order and the norm's
  # sums are integers, so the three train bit for bit alike (hooks_clip_steps_np2 on the CPU); a MAX
  # below the norms here, so that every step clips (the row fails if none did)
  for s in 06_full 07_zero 08_fsdp; do
    n=${s%%_*}
    two "step${n}_clip_np2" "step $n --clip_grad_norm, $on" "$BIN/$s" "${nccl[@]}" "${mr[@]}" \
      --clip_grad_norm 0.01 --metrics "$LOG/clip${n}_np2_{rank}.jsonl"
  done
  compare "step 06 --clip_grad_norm, $on: replicas identical" replicas "$LOG/clip06_np2_" 2
  for n in 07 08; do
    compare "step $n = step 06 with --clip_grad_norm, $on" clip "$LOG/clip06_np2_0.jsonl" \
      "$LOG/clip${n}_np2_0.jsonl" 0.01
  done
  # --check_finite with a NaN in rank 1's third backward pass (common/nn/mlp.c's test hook
  # DDP_TEST_NAN_BACKWARD, set on rank 1 alone): the job ends before that bucket's all-reduce, naming
  # rank 1 and step 3 (the ranks' agreement over NCCL; a hang here is a rank left in a collective)
  cat > "$work/nan_on_rank1" <<'SH'
#!/bin/sh
[ "$RANK" = 1 ] && export DDP_TEST_NAN_BACKWARD=3
exec "$@"
SH
  chmod +x "$work/nan_on_rank1"
  run "step06_finite_np2" launch 2 "${place[@]}" "$work/nan_on_rank1" "$BIN/06_full" "${nccl[@]}" "${mr[@]}" \
    --check_finite
  compare "step 06 --check_finite, a NaN on rank 1, $on: stopped" finite "$last_log" "$last_rc" 1 3
fi
multi_rows off

# ---- 5c. step 09's live recovery over NCCL: 3 ranks, one killed -----------------------------------------
# NEVER RUN YET: written on the build VM, which has no GPU; the NCCL path of a recoverable group
# (common/dist/dist_nccl.c: the communicator aborted after --ft_op_timeout, a new non-blocking one per
# quorum, its unique id through the lighthouse's store) has only been compiled. Step 09 under
# scripts/launch.sh --ft at 3 ranks (on one GPU with NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1 and
# NCCL_MAX_CTAS=2, as docs/gpu_troubleshooting.md §1 says; else on 3 GPUs), replica 2 SIGKILLed as it
# starts step 4 (DDP_TEST_FT_KILL=2:4): the survivors' step 4 times out (--ft_op_timeout 5), is not
# committed, and they go on at 2 ranks to the end (exit 0). Then invariant I2, shrink = resume (on the
# CPU: tests/fault/live_drill.py live_shrink_equals_resume): their final param_digest is that of a
# 2-rank --resume from a 3-rank run's step-3 checkpoint.
live_check() {
  local k k2 on row="step 09 --ft, replica 2 of 3 killed at step 4"
  if [ "$nccl_code" -ge 23000 ]; then k=1 k2=1
  elif [ "$ngpu" -ge 3 ]; then k=3 k2=2
  else
    skip "$row" "needs NCCL >= 2.30 loaded or 3 or more GPUs ($ngpu GPU(s), NCCL ${loaded:-unknown})"
    return
  fi
  on=$(ranks_on 3 "$k")
  row="$row, $on"
  local live=(--device cuda --backend nccl --data synthetic --dataset_size 515 --hidden 63 --batch_size 32
              --epochs 2 --save_interval 0 --log_interval 1000 --timeout 60)
  placement 3 "$k"
  run LIMIT=180 live09_kill launch 3 "${place[@]}" DDP_TEST_FT_KILL=2:4 --ft "$BIN/09_live" "${live[@]}" \
    --ft_op_timeout 5 --metrics "$LOG/live09_{rank}.jsonl"
  if [ -n "$forced" ]; then skip "$row: the others go on" "-"
  elif [ "$last_rc" -ne 0 ]; then verdict "$row: the others go on" "$(verdict_run "$last_rc" "$last_log" "")"
  elif ! grep -qF -- '-> step 4 not committed' "$last_log"; then
    fail "$row: the others go on" "exit 0, but no '-> step 4 not committed' (logs/${last_log##*/})"
  elif ! grep -qF 'quorum 2 = replicas [0, 1]' "$last_log"; then
    fail "$row: the others go on" "exit 0, but no 'quorum 2 = replicas [0, 1]' (logs/${last_log##*/})"
  else
    ok "$row: the others go on" "$(grep -m1 -o 'recovery: step 4 redone.*' "$last_log")"
  fi
  run LIMIT=120 live09_ckpt launch 3 "${place[@]}" "$BIN/09_live" "${live[@]}" --max_steps 3 --save_interval 1 \
    --ckpt_dir "$work/ck09" || fail "step 09, $on, 3 steps and a checkpoint" "$(last_error)"
  placement 2 "$k2"
  run LIMIT=120 live09_resume launch 2 "${place[@]}" "$BIN/09_live" "${live[@]}" \
    --resume "$work/ck09/checkpoint.bin" --ckpt_dir "$work/r09" --metrics "$LOG/res09_{rank}.jsonl" ||
    fail "step 09, 2 ranks, resumed from the 3-rank step 3" "$(last_error)"
  compare "$row: shrink = resume (I2)" digest "$LOG/live09_0.jsonl" "$LOG/res09_0.jsonl"
}
section 5c "step 09's live recovery over NCCL, 3 ranks (never run yet)" $EST_LIVE
multi_rows on
live_check
multi_rows off

# ---- 6. the benchmark ------------------------------------------------------------------------------------
if [ "${BENCH:-0}" -gt 0 ]; then
  section 6 "the benchmark (bench/gpu_bench.sh -r $BENCH)" $((EST_BENCH * BENCH))
  # its own build folder (with the benchmarks), the same NCCL (NCCL_ROOT, exported above) and
  # architectures; the deps prefix's libdeflate through CMAKE_PREFIX_PATH; what is left of the
  # deadline as its own (it stops starting runs past it and writes its tables as it goes)
  bench_deadline=$(left)
  [ -n "$DEADLINE" ] || bench_deadline=""
  if run LIMIT=36000 bench env BENCH_OUT="$LOG/bench" CUDA_ARCHS="${CUDA_ARCHS:-90}" CMAKE_PREFIX_PATH="${P:-}" \
       DDP_GPU_DEADLINE="$bench_deadline" bench/gpu_bench.sh -r "$BENCH" "$BUILD_DIR-bench"; then
    ok "benchmark (gpu_bench.sh -r $BENCH)" "tables in logs.tar.gz (logs/bench/results.md)"
  elif [ "$last_rc" -eq 3 ]; then  # the deadline stopped it: the repetitions done are in its tables
    skip "benchmark (gpu_bench.sh -r $BENCH)" "deadline: stopped early; the repetitions done are in logs/bench/results.md"
    deadline_why="${deadline_why:+$deadline_why; }the benchmark stopped early"
  else
    fail "benchmark (gpu_bench.sh -r $BENCH)" "see logs.tar.gz (logs/${last_log##*/}, logs/bench/)"
  fi
fi
[ ${#left_out[@]} -eq 0 ] || deadline_why="${deadline_why:+$deadline_why; }the deadline left out section(s) ${left_out[*]}"
finish "complete after $(elapsed) s${deadline_why:+ ($deadline_why)}"
# 1: a row FAILED; 3: none did, but the deadline cut a run or left a section out (the table is partial)
[ "$failed" -eq 0 ] && [ -n "$deadline_why" ] && exit 3
exit $failed
