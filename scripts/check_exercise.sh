#!/usr/bin/env bash
# Builds a learner's version of a step and runs, on it, the unit tests of the stage's own code (03:
# the sampler, 06: the reducer) and the step's integration claims.
#
#   scripts/check_exercise.sh N FILE [FILE...]
#   scripts/check_exercise.sh --build-only N FILE [FILE...]   compile and link only, and keep the
#                             program at work/build/bin/<step> (DDP_BUILD_OUT: instead of work/build),
#                             to run it by hand (--trace, Fashion-MNIST, strace) as build/bin/<step>
#   scripts/check_exercise.sh --claims N       print the claims that N runs (without DDP_CLAIMS), and exit
#
# N is the step (02 .. 09), or 06_fault: the extra exercise on step 06's snapshots and resume (its
# file is step 06's train.c, its claims the fault drill's; no unit tests). 09 (or 09_live): live
# recovery, whose claims are tests/fault/live_drill.py's drills under scripts/launch.sh --ft (Gloo). Each FILE replaces the step's file of the same name (train.c, sampler.c,
# reducer.c, fsdp.c); the step's other files are used as they are. The program is compiled and linked exactly
# as the main build compiles the step (the commands come from `ninja -t commands`, so the flags and
# the ddp_* libraries of common/ are the build's own), into a temporary folder, under the step's name, next
# to links to the main build's other step programs. Then the scenario runner (python3 -m tests.harness) runs the step's
# claims with DDP_BIN_DIR pointing there, and this prints PASS or FAIL per claim, with the runner's
# reason for a failure and its likely cause. Every run gets --timeout $DDP_RUN_TIMEOUT (15 s), so that
# a collective which some rank never reaches ends the job quickly and is reported as a hang.
#
# Where the backend matters (the learner's code joins the process group or calls collectives: 02,
# 04 to 08), one claim runs a second time as CLAIM@launch: the same claim with its
# multi-rank runs under scripts/launch.sh (the Gloo backend, as under torchrun or a plain srun)
# instead of mpirun (MPI), for a program that must work under both; e.g. one that never calls
# dist_connect works under mpirun and crashes under launch.sh. Skipped in a build without Gloo.
#
# Unit tests (03, 06): the GoogleTest binary of the main build (unit_tests) is linked again with the
# learner's sampler.c or reducer.c in place of the step's, that file compiled with AddressSanitizer
# and UBSan when the compiler has them (a read past the end of an array then fails the test even when
# the value read happens to be right), and its Sampler* or Reducer* tests run. Steps 02, 04 and 05
# teach code that lives in train.c, step 07's reducer has no unit tests of its own (the Reducer*
# tests are step 06's), nor has step 08's fsdp.c: their integration claims are their tests.
#
# The first claim, stepNN_own_binary, checks that the program which runs is the one built here (/proc
# shows each process's executable after any exec), not the main build's. The learner's code runs
# unsandboxed, as the user who runs this.
#
# Ctrl-C (or TERM, HUP) stops the running test or claim and every process it started, mpirun's ranks
# included, removes the temporary folder (also the claims' own folders, which the runner keeps in it)
# and exits 128 + the signal's number (130 for Ctrl-C).
#
# The checker refuses to run (exit 2) when the build cannot run what makes the check strict: the unit
# tests of 03 and 06 need GoogleTest, the claims need MPI (Open MPI, mpiexec); without them wrong
# solutions pass. DDP_ALLOW_WEAK=1 runs it anyway, skipping those parts, and says so.
#
# Exit status: 0 when every unit test and claim passes, 1 otherwise, 2 on a usage error or a refusal.
#
# Environment: DDP_BUILD_DIR  the configured Ninja build to borrow from (default: build)
#              DDP_CHECK_TIMEOUT  seconds per claim before it counts as hung (default 300)
#              DDP_RUN_TIMEOUT    --timeout of every run: a collective's longest wait (default 15)
#              DDP_CLAIMS     run these claims instead of the step's list (space-separated; "none")
#              DDP_UNIT       0: skip the unit tests
#              DDP_ALLOW_WEAK 1: check even without GoogleTest or MPI (a weaker check)
#              DDP_BUILD_OUT  where --build-only keeps the program (default: work/build)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() { echo "usage: $0 N FILE [FILE...]   (N = 02..09, 06_fault or 07_clip; e.g. $0 03 exercises/03_sampler/sampler.c)" >&2; exit 2; }
# The build's commands for a target, rebuilt to compile some of its sources from elsewhere:
#   commands TARGET OUTPUT NEW_OUTPUT OBJDIR FLAGS SRC=NEW...
# prints `compile CMD` for each source SRC of TARGET (the file NEW instead, its object in OBJDIR),
# then `link CMD` (the objects from OBJDIR, the program written to NEW_OUTPUT instead of OUTPUT),
# FLAGS added to both. The commands are split into words as the shell would and every word is quoted
# again, so that spaces in any path survive (CMake quotes such paths in build.ninja); a source is
# matched by its physical path, as the build's own paths may not go through the same symlinks as
# ours. Exit status 1 when TARGET has no such compile or link command.
commands() {
  (cd "$build" && ninja -t commands "$1") | python3 -c '
import os, shlex, sys
build, target, out, new_out, objdir, flags = sys.argv[1:7]
sources = {os.path.realpath(a.split("=", 1)[0]): a.split("=", 1)[1] for a in sys.argv[7:]}
ops = {"&&", "||", ";", "|"}
def sh(words):
    return " ".join(w if w in ops else shlex.quote(w) for w in words)
objects, compiles, links = {}, [], []
lines = [shlex.split(line) for line in sys.stdin if line.strip()]
for words in lines:
    i = words.index("-c") if "-c" in words[:-1] else -1
    if i < 0 or os.path.realpath(os.path.join(build, words[i + 1])) not in sources or "-o" not in words[:-1]:
        continue
    obj = words[words.index("-o") + 1]
    new = os.path.join(objdir, os.path.basename(obj))
    objects.update({obj: new, obj + ".d": new + ".d"})
    words[i + 1] = sources[os.path.realpath(os.path.join(build, words[i + 1]))]
    words = [objects.get(w, w) for w in words]
    compiles.append(sh(words[:i] + shlex.split(flags) + words[i:]))
for words in lines:
    if "-c" in words or "-o" not in words[:-1] or words[words.index("-o") + 1] != out:
        continue
    i = words.index("-o")
    words = [objects.get(w, w) for w in words]
    words[i + 1] = new_out
    links.append(sh(words[:i] + shlex.split(flags) + words[i:]))
if not compiles or len(links) != 1:
    sys.exit(1)
os.makedirs(objdir, exist_ok=True)
for c in compiles:
    print("compile", c)
print("link", links[0])
' "$build" "$@"
}

# A log with the temporary folder's sources named as the step's files.
untmp() {
  local text
  text=$(< "$1")
  printf '%s\n' "${text//"$tmp/src/"/"$step/"}"
}

# The processes of process group $1, and every process below them (from /proc): an mpirun in the
# group starts its ranks in process groups of their own.
group_tree() {
  local -A kids=()
  local stat line pid fields found="" queue="" p
  for stat in /proc/[0-9]*/stat; do
    read -r line 2> /dev/null < "$stat" || continue
    pid=${stat#/proc/}
    pid=${pid%/stat}
    read -ra fields <<< "${line##*) }"  # state ppid pgrp ...; the name before ") " may hold spaces
    [ "${fields[0]}" = Z ] && continue
    kids[${fields[1]}]+=" $pid"
    [ "${fields[2]}" = "$1" ] && queue+=" $pid"
  done
  local -A visited=()
  while [ -n "${queue// /}" ]; do
    read -r p queue <<< "$queue"
    [ -z "${visited[$p]:-}" ] || continue
    visited[$p]=1
    found+=" $p"
    queue+=" ${kids[$p]:-}"
  done
  echo $found
}

alive() {  # any of these pids still running (a zombie has ended)
  local p state
  for p in "$@"; do
    state=$(sed 's/.*) \(.\).*/\1/' "/proc/$p/stat" 2> /dev/null) || continue
    [ "$state" != Z ] && return 0
  done
  return 1
}

# Ends what is left of process group $1 (led by a `timeout`) and what it started: TERM first
# (mpirun then stops its ranks and removes its files in TMPDIR and /dev/shm, which a KILL would
# leave), KILL after 5 s. The TERM goes to the `timeout` while it runs, which sends it on to the whole
# group once: a second TERM, e.g. from a kill of the group as well, makes mpirun quit at once, its
# files left behind (seen with Open MPI 4.1).
stop_group() {
  local pids i
  pids=$(group_tree "$1")
  [ -n "$pids" ] || return 0
  if alive "$1"; then kill -TERM "$1"; else kill -TERM -- "-$1"; fi 2> /dev/null
  for ((i = 0; i < 50; i++)); do
    # shellcheck disable=SC2086
    alive $pids || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL -- "-$1" $pids $(group_tree "$1") 2> /dev/null
}

# in_group LIMIT OUT ERR CMD...: runs CMD with stdout in OUT and stderr in ERR (the same file: both
# there), ended after LIMIT seconds; sets rc. `timeout` gives CMD a process group of its own, which
# a Ctrl-C at the terminal does not reach, and bash runs a trap only once a foreground command has
# ended: so CMD runs in the background, and `wait`, which a trapped signal interrupts, waits for it.
child=""
in_group() {
  local limit=$1 out=$2 err=$3
  shift 3
  if [ "$out" = "$err" ]; then
    timeout -k 10 "$limit" "$@" > "$out" 2>&1 &
  else
    timeout -k 10 "$limit" "$@" > "$out" 2> "$err" &
  fi
  child=$!
  wait "$child"
  rc=$?
  stop_group "$child"  # whatever a killed command left, e.g. the ranks of an mpirun
  child=""
}

# Ctrl-C (INT), TERM or HUP: stop the running test or claim and its ranks, remove the temporary
# folder (the EXIT trap), exit 128 + the signal's number.
interrupted() {
  trap '' INT TERM HUP
  [ -z "$child" ] || stop_group "$child"
  echo "$0: interrupted by SIG$1" >&2
  exit "$2"
}
trap 'interrupted INT 130' INT
trap 'interrupted TERM 143' TERM
trap 'interrupted HUP 129' HUP

build_only=0 list_claims=0
[ "${1:-}" = --build-only ] && { build_only=1; shift; }
[ "${1:-}" = --claims ] && { list_claims=1; shift; set -- "${1:-}" -; }
[ $# -ge 2 ] || usage
n=$1
shift
case $n in 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9) n=0$n ;; 09_live) n=09 ;; 02 | 03 | 04 | 05 | 06 | 07 | 08 | 09 | 06_fault | 07_clip) ;; *) usage ;; esac
exercise=$n  # the exercise's name; n: its step's number
n=${n:0:2}
what="step $n"
[ "$exercise" = 06_fault ] && what="exercise 06_fault (step 06's snapshots and resume)"

case $n in
  02) claims="step02_redundant step02_redundant@launch" ;;
  03) claims="step03_drift" ;;
  04) claims="step04_replicas_np2 step04_matches_baseline_np2 step04_broadcast step04_replicas_np2@launch" ;;
  05) claims="step05_replicas_np2 step05_matches_baseline_np2 step05_eval_exact step05_one_writer step05_resume
              step05_matches_baseline_np2@launch" ;;
  06) claims="step06_replicas_np2 step06_matches_step04_np2 step06_grad_accum step06_trace step06_replicas_np2@launch" ;;
  07) claims="step07_replicas_np2 step07_replicas_np3 step07_matches_step06_np2 step07_matches_step06_np3
              step07_memory step07_checkpoints step07_replicas_np3@launch" ;;
  08) claims="step08_replicas_np2 step08_replicas_np3 step08_matches_step06_np2 step08_matches_step06_np3
              step08_checkpoints step08_trace step08_replicas_np3@launch" ;;
  # 09: the live drills of tests/fault/live_drill.py (exercises/checker/live09.py), under launch.sh --ft
  09) claims="live09_shrink_equals_resume live09_no_sample_lost live09_heal_equals_resume" ;;
esac
[ "$exercise" = 06_fault ] && claims="fault06_drill fault06_one_writer fault06_barrier fault06_resume_mid_epoch"
# 07_clip: the global norm under sharding; its claims are tests/integration/hooks_check.py's scenarios
[ "$exercise" = 07_clip ] && what="exercise 07_clip (the global norm under sharding)" &&
  claims="clip_steps_np2 clip_norm_np3"
# First of all: the program that runs is the one built here from the learner's files.
claims="step${n}_own_binary $claims"
if [ $list_claims = 1 ]; then
  echo $claims
  exit 0
fi
claims=${DDP_CLAIMS:-$claims}
no_claims_why=""
[ "$claims" = none ] && claims="" no_claims_why="DDP_CLAIMS=none"
# The unit tests of the stage's own code: (the step's source file they test, gtest filter)
case $exercise in
  03) unit_src=sampler.c unit_filter='Sampler*' ;;
  06) unit_src=reducer.c unit_filter='Reducer*' ;;
  *) unit_src="" unit_filter="" ;;
esac
no_unit_why=""
[ "${DDP_UNIT:-1}" = 0 ] && [ -n "$unit_src" ] && unit_src="" no_unit_why="DDP_UNIT=0"

step_src=$(ls -d "$root"/steps/"$n"_*/ 2>/dev/null | head -n 1)
[ -n "$step_src" ] || { echo "$0: no folder steps/${n}_*" >&2; exit 2; }
step_src=${step_src%/}
step=$(basename "$step_src")

build=${DDP_BUILD_DIR:-build}
case $build in /*) ;; *) [ -d "$build" ] || build=$root/$build ;; esac
build=$(cd "$build" 2>/dev/null && pwd) || {
  echo "$0: no build folder '${DDP_BUILD_DIR:-build}': build first, from the repository root:" >&2
  echo "  cmake -S . -B build -G Ninja && cmake --build build" >&2
  exit 2
}
if [ ! -f "$build/build.ninja" ]; then
  echo "$0: $build is not a Ninja build; configure one with: cmake -S . -B build -G Ninja" >&2
  exit 2
fi

# What makes the check strict must be there: the unit tests (GoogleTest) for 03 and 06, MPI for the
# claims. Without them, overlapping shards or out-of-order buckets would pass: refuse, unless told.
weak=()
if [ $build_only = 0 ] && [ -n "$unit_src" ] && ! (cd "$build" && ninja -t query unit_tests) > /dev/null 2>&1; then
  weak+=("the build in $build has no unit tests: GoogleTest was not found when it was configured, and the
  unit tests of $unit_src are what catch the mistakes the claims cannot see (e.g. $( [ "$n" = 03 ] &&
  echo "overlapping shards, reads past the permutation" || echo "buckets out of order, waiting too early")).
  Install it (Debian/Ubuntu: sudo apt-get install libgtest-dev; a networked machine can also configure
  with -DDDP_FETCH_GTEST=ON; a node without apt: scripts/gpu/gpu_deps.sh) and configure and build again:
    cmake -S . -B build -G Ninja && cmake --build build")
fi
if [ $build_only = 0 ] && [ -n "$claims" ]; then
  if ! (cd "$build" && ninja -t commands ddp_base) 2> /dev/null | grep -c -- -DHAVE_MPI=1 > /dev/null; then
    weak+=("the build in $build has no MPI (it was configured without Open MPI): the claims run the
  program at 2 and more ranks under mpiexec. Install it (Debian/Ubuntu: sudo apt-get install
  libopenmpi-dev openmpi-bin) and configure and build again: cmake -S . -B build -G Ninja && cmake --build build")
    no_mpi=1
  elif ! command -v "${DDP_MPIEXEC:-mpiexec}" > /dev/null 2>&1; then
    weak+=("no ${DDP_MPIEXEC:-mpiexec} on PATH: the claims run the program at 2 and more ranks under it.
  Install Open MPI's launcher (Debian/Ubuntu: sudo apt-get install openmpi-bin), or set DDP_MPIEXEC")
    no_mpi=1
  fi
fi
# CLAIM@launch runs under scripts/launch.sh, on the Gloo backend: a build without Gloo skips them.
no_gloo_claims=""
if [ $build_only = 0 ] && [[ $claims == *@launch* ]] &&
   ! (cd "$build" && ninja -t commands ddp_base) 2> /dev/null | grep -c -- -DHAVE_GLOO=1 > /dev/null; then
  for c in $claims; do [[ $c == *@launch ]] && no_gloo_claims+=" $c"; done
  claims=$(for c in $claims; do [[ $c == *@launch ]] || printf '%s ' "$c"; done)
fi
# 09's claims run the program under scripts/launch.sh --ft, which needs Gloo (MPI cannot recover)
if [ $build_only = 0 ] && [ "$n" = 09 ] && [ -n "$claims" ] &&
   ! (cd "$build" && ninja -t commands ddp_base) 2> /dev/null | grep -c -- -DHAVE_GLOO=1 > /dev/null; then
  weak+=("the build in $build has no Gloo: step 09's claims run the program under scripts/launch.sh --ft,
  whose recoverable process group is Gloo's. Install it (Debian/Ubuntu: sudo apt-get install libgloo-dev)
  and configure and build again: cmake -S . -B build -G Ninja && cmake --build build")
  no_gloo=1
fi
if [ ${#weak[@]} -gt 0 ]; then
  if [ "${DDP_ALLOW_WEAK:-0}" != 1 ]; then
    echo "$0: refusing to check step $n: without these, wrong solutions pass:" >&2
    for w in "${weak[@]}"; do echo "- $w" >&2; done
    echo "To check anyway, knowing that the check is weaker: DDP_ALLOW_WEAK=1 $0 $n $*" >&2
    exit 2
  fi
  echo "WARNING (DDP_ALLOW_WEAK=1): a weaker check: what cannot run is skipped, and wrong solutions may pass:"
  for w in "${weak[@]}"; do echo "- $w"; done
  [ "${no_mpi:-0}" = 1 ] && claims="" no_claims_why="no MPI, DDP_ALLOW_WEAK=1"
  [ "${no_gloo:-0}" = 1 ] && claims="" no_claims_why="no Gloo, DDP_ALLOW_WEAK=1"
fi

# The learner's files: each must name a source file of the step.
declare -A mine=()
for f in "$@"; do
  [ -f "$f" ] || { echo "$0: no such file: $f" >&2; exit 2; }
  base=$(basename "$f")
  if [ ! -f "$step_src/$base" ] || [[ $base != *.c ]]; then
    echo "$0: $f: step $n has no source file named $base; its files are:" \
         "$(cd "$step_src" && ls *.c | tr '\n' ' ')" >&2
    exit 2
  fi
  mine[$base]=$(cd "$(dirname "$f")" && pwd)/$base
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_exercise.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/obj" "$tmp/bin"
cp "$step_src"/*.[ch] "$tmp/src/"
for base in "${!mine[@]}"; do cp "${mine[$base]}" "$tmp/src/$base"; done

# Bring the library and the other steps' programs up to date (instant when they are), then compile
# the step's sources from $tmp/src with the build's own commands.
echo "building $step from: $*"
targets=$(cd "$root/steps" && ls -d [0-9][0-9]_* | tr '\n' ' ')
[ "$n" = 09 ] && targets+=" lighthouse"  # launch.sh --ft starts it, from the program's folder
# shellcheck disable=SC2086
if ! cmake --build "$build" --target ddp_monitor $targets > "$tmp/build.log" 2>&1; then
  echo "FAIL build: the main build in $build does not build; fix that first:" >&2
  tail -n 20 "$tmp/build.log" >&2
  exit 1
fi
sources=()
for f in "$step_src"/*.c; do sources+=("$f=$tmp/src/$(basename "$f")"); done
if ! commands "$step" "bin/$step" "$tmp/bin/$step" "$tmp/obj" "" "${sources[@]}" > "$tmp/cmds"; then
  echo "$0: could not find the compile and link commands of $step in $build" >&2
  exit 2
fi
ok=1
while read -r kind cmd; do
  [ "$kind" = link ] && [ $ok = 0 ] && break
  (cd "$build" && bash -c "$cmd") >> "$tmp/compile.log" 2>&1 || ok=0
done < "$tmp/cmds"
if [ $ok = 0 ]; then
  echo "FAIL build: $step does not compile or link with your file(s):"
  untmp "$tmp/compile.log" | head -n 40
  exit 1
fi
if [ -s "$tmp/compile.log" ]; then
  echo "compiler warnings:"
  untmp "$tmp/compile.log" | head -n 20
fi
if [ $build_only = 1 ]; then
  # Kept, to be run by hand as the main build's program is (the same flags and library)
  out=${DDP_BUILD_OUT:-$root/work/build}
  case $out in /*) ;; *) out=$PWD/$out ;; esac
  # (09: with the main build's lighthouse beside it, where scripts/launch.sh --ft looks for it)
  mkdir -p "$out/bin" && cp "$tmp/bin/$step" "$out/bin/$step.new" && mv -f "$out/bin/$step.new" "$out/bin/$step" &&
    { [ "$n" != 09 ] || ln -sfn "$build/bin/lighthouse" "$out/bin/lighthouse"; } || {
    echo "$0: could not keep the program in $out/bin" >&2
    exit 1
  }
  shown=${out#"$PWD"/}
  echo "built $step: $shown/bin/$step (run it as build/bin/$step is run, e.g.:"
  echo "  source scripts/mpi_env.sh && mpirun -np 2 $shown/bin/$step --device cpu --data synthetic --epochs 1)"
  exit 0
fi
for prog in "$build"/bin/[0-9][0-9]_*; do
  [ "$(basename "$prog")" = "$step" ] || ln -s "$prog" "$tmp/bin/"
done
[ "$n" = 09 ] && ln -s "$build/bin/lighthouse" "$tmp/bin/"  # the main build's: no part of the exercise

failed=0
# The stage's unit tests, with the learner's $unit_src linked into the main build's unit_tests.
if [ -n "$unit_src" ]; then
  if ! cmake --build "$build" --target unit_tests > "$tmp/ubuild.log" 2>&1 ||
     ! commands unit_tests bin/unit_tests "$tmp/unit_tests" "$tmp/uobj" "" \
       "$step_src/$unit_src=$tmp/src/$unit_src" > /dev/null; then
    echo "SKIP unit tests: the build has no unit_tests (GoogleTest missing?)"
    unit_src="" no_unit_why="no unit_tests in the build"
  fi
fi
if [ -n "$unit_src" ]; then
  sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
  build_unit() {  # $1: extra compile and link flags
    commands unit_tests bin/unit_tests "$tmp/unit_tests" "$tmp/uobj" "$1" \
      "$step_src/$unit_src=$tmp/src/$unit_src" > "$tmp/ucmds" || return 1
    local kind cmd
    while read -r kind cmd; do
      (cd "$build" && bash -c "$cmd") || return 1
    done < "$tmp/ucmds" > "$tmp/ucompile.log" 2>&1
  }
  with="with AddressSanitizer and UBSan"
  if ! build_unit "$sanitize"; then
    with="without sanitizers (this compiler cannot build with -fsanitize=address,undefined)"
    build_unit "" || { echo "FAIL build: the unit tests do not link with your $unit_src:"; untmp "$tmp/ucompile.log" | head -n 20; exit 1; }
  fi
  in_group 120 "$tmp/unit.out" "$tmp/unit.out" env ASAN_OPTIONS=detect_leaks=0 \
    UBSAN_OPTIONS=print_stacktrace=1 OPENBLAS_NUM_THREADS=1 "$tmp/unit_tests" --gtest_filter="$unit_filter"
  urc=$rc
  # One line per failed test, with the first "likely cause" its checks printed; a sanitizer's report.
  python3 - "$tmp/unit.out" "$urc" "$unit_src" "$with" "$tmp/src/" <<'PY' || failed=1
import re, sys
out, rc, src, how, tmpsrc = open(sys.argv[1], errors="replace").read(), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
out = out.replace(tmpsrc, "")
tests, failed, causes, where, current = [], [], {}, {}, None
for line in out.splitlines():
    m = re.match(r"\[ RUN      \] (\S+)", line)
    if m:
        current = m.group(1)
        tests.append(current)
    elif re.match(r"\[  FAILED  \] \S+ \(", line):
        failed.append(line.split()[3])
    elif current and "likely cause:" in line and current not in causes:
        causes[current] = line[line.index("likely cause:"):]
    elif current and re.search(r": Failure$", line) and current not in where:
        where[current] = line.rsplit("/", 1)[-1][:-len(": Failure")]
san = [l for l in out.splitlines() if l.startswith("SUMMARY: ") or "runtime error:" in l]
if rc == 0 and not failed:
    print(f"PASS unit tests: {len(tests)} tests of {src}, {how}")
    sys.exit(0)


def several_ready(test):
    """A check of started() in `test` that found a non-empty proper prefix of the buckets expected: the
    first bucket left out either was ready (no tensor pending, as the test prints after the check: one
    hook made several ready, and only the first started: the reducer's typical `if` for `while`), or
    was not (its count is wrong: mark_variable_ready counted its tensors down elsewhere, or too often)."""
    part = out.split(f"[ RUN      ] {test}", 1)[-1].split("[ RUN      ]", 1)[0]
    for got, want, pending in re.findall(r"started\(\)\n\s+Which is: \{ ([\d, ]*) \}\n.*\n\s+Which is: \{ ([\d, ]*) \}"
                                         r"(?:\npending tensors per bucket: \{ ([-\d, ]*) \})?", part):
        got, want, pending = got.split(", "), want.split(", "), pending.split(", ") if pending else []
        if got != [""] and len(got) < len(want) and want[:len(got)] == got:
            nxt = int(want[len(got)])
            left = int(pending[nxt]) if nxt < len(pending) else 0
            if left > 0:
                return (f"likely cause: bucket {nxt} should have started (the hooks of all its tensors ran), but it "
                        f"still waits for {left} of its tensors, so mark_bucket_ready rightly stops there: "
                        "mark_variable_ready counts a tensor down in a bucket other than its own: it must decrement "
                        "the pending count of the tensor's own bucket, r->buckets[r->bucket_of[tensor]].pending "
                        "(a bucket may hold several tensors)")
            if left < 0:
                return (f"likely cause: bucket {nxt} was counted down {-left} more time{'s' if left < -1 else ''} "
                        "than it has tensors (its pending count is "
                        f"{left}, never 0), so mark_bucket_ready rightly stops there: mark_variable_ready must "
                        "decrement, once per tensor, the pending count of the tensor's own bucket, "
                        "r->buckets[r->bucket_of[tensor]].pending")
            return (f"likely cause: one hook made buckets {', '.join(want[len(got) - 1:])} ready at once, and "
                    f"mark_bucket_ready started only bucket {got[-1]}: in reducer.c it must start every ready bucket "
                    "from r->next_bucket on, in order, one after the other (a `while` loop, not an `if`: one "
                    "hook can complete several buckets), stopping at the first that is not ready")
    return None


for t in failed:
    print(f"FAIL unit {t}" + (f" ({where[t]})" if t in where else "") + ":")
    print(f"     {(src == 'reducer.c' and several_ready(t)) or causes.get(t, 'see the test in tests/unit/ for what it checks')}")
if san or not failed:
    t = tests[-1] if tests else "?"
    # The program's own last words (die: "error: ..."), when it ended in the middle of a test
    died = [l for l in out.splitlines() if l.startswith("error: ")][-1:]
    print(f"FAIL unit {t}" + (f" ({where[t]})" if t in where and not san else "") + ": " +
          ("; ".join(san[:2]) if san else f"the test program ended with status {rc} in the middle of it" +
           (f": {died[0]}" if died else "")))
    if not san and ((src == "reducer.c" and several_ready(t)) or t in causes):
        print(f"     {(src == 'reducer.c' and several_ready(t)) or causes[t]}")
    elif not san and src == "reducer.c" and died and "still in flight" in died[0]:
        print("     likely cause: a bucket was started again while its all-reduce was in flight: within one "
              "backward, mark_bucket_ready must advance r->next_bucket past every bucket it starts")
    frames = [l.strip() for l in out.splitlines() if re.match(r"\s*#\d+ .* in .*" + re.escape(src), l)]
    if frames:
        print(f"     at {frames[0].split(' in ', 1)[1]}")
    if any("overflow" in l for l in san):
        print(f"     likely cause: {src} reads or writes outside an array (the position of an element past "
              "its end, e.g. one that should wrap around, or a count that is one too many)")
    elif san:
        print("     likely cause: undefined behaviour in " + src + " (the sanitizer's message above)")
sys.exit(1)
PY
fi

# Run the claims, as CTest would (tests/integration/tests.cmake sets the same environment).
# shellcheck source=scripts/mpi_env.sh
source "$root/scripts/mpi_env.sh"
export DDP_BIN_DIR=$tmp/bin DDP_MPIEXEC=${DDP_MPIEXEC:-mpiexec} DDP_RUN_TIMEOUT=${DDP_RUN_TIMEOUT:-15}
# the runner is a package of this checkout (tests/harness/): python3 -m tests.harness from anywhere
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
limit=${DDP_CHECK_TIMEOUT:-300}
export DDP_CHECK_TMPDIR=$tmp/claim
for c in $no_gloo_claims; do
  echo "SKIP $c: this build has no Gloo (libgloo-dev), so nothing runs under scripts/launch.sh"
done
# Every claim, whichever DDP_CLAIMS selects, checks that the program which ran is the one built here:
# each process image records itself (exercises/checker/exe_record.c, preloaded by name from a folder of
# its own, as LD_PRELOAD splits paths at spaces), and an image other than the learner's program in a
# process that ran it (an exec), or a step program started below it, fails the claim. (The claim
# stepNN_own_binary watches /proc as well, for a program that would drop LD_PRELOAD.)
preload=()
if [ -n "$claims" ]; then
  if [[ $tmp != *:* ]] && mkdir "$tmp/preload" &&
     ${CC:-cc} -shared -fPIC -O1 -o "$tmp/preload/ddp_exe_record.so" "$root/exercises/checker/exe_record.c" \
       > "$tmp/preload.log" 2>&1; then
    preload=(env "LD_PRELOAD=ddp_exe_record.so${LD_PRELOAD:+ $LD_PRELOAD}"
             "LD_LIBRARY_PATH=$tmp/preload${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "DDP_EXE_RECORD=$tmp/exe.log")
  else
    echo "NOTE: no C compiler built exercises/checker/exe_record.c: only ${n:+step${n}_own_binary} checks that the program"
    echo "      which runs is the one built from your file(s)"
  fi
fi
# The images that ran instead of the learner's program during a claim (one line per program), from
# the records above.
other_programs() {
  python3 - "$tmp/exe.log" "$tmp/bin/$step" <<'PY'
import os, re, sys
log, learner = sys.argv[1], os.path.realpath(sys.argv[2])
records = []
try:
    with open(log, errors="replace") as f:
        for line in f:
            field = line.rstrip("\n").split(" ", 4)
            if len(field) == 5:
                records.append(((field[0], field[1]), (field[2], field[3]), re.sub(r" \(deleted\)$", "", field[4])))
except OSError:
    sys.exit(0)
parent = {key: up for key, up, _ in records}
learners, found = set(), []
for key, up, exe in records:  # in the order written: an exec's image after the one it replaced
    if exe == learner:
        learners.add(key)
        continue
    if key in learners:  # the learner's process runs another program now
        found.append(exe)
        continue
    seen = set()
    while up not in learners and up in parent and up not in seen:  # started below the learner's program?
        seen.add(up)
        up = parent[up]
    if up in learners and re.match(r"\d\d_", os.path.basename(exe)):
        found.append(exe)
for exe in dict.fromkeys(found):
    print(exe)
PY
}
for claim in $claims; do
  # CLAIM@launch: the scenario CLAIM, its ranks started by scripts/launch.sh (Gloo)
  name=${claim%@*} how=()
  [ "$name" = "$claim" ] || how=(--launcher "${claim#*@}")
  # the runner's folder for the claim's files, inside ours: removed even when the claim is killed
  mkdir "$tmp/claim"
  rm -f "$tmp/exe.log"
  in_group "$limit" "$tmp/out" "$tmp/err" ${preload[@]+"${preload[@]}"} \
    python3 -m tests.harness ${how[@]+"${how[@]}"} "$name"
  rm -rf "$tmp/claim"
  others=""
  [ ${#preload[@]} -eq 0 ] || others=$(other_programs)
  if [ -n "$others" ]; then
    failed=1
    echo "FAIL $claim: the program that ran is $(head -n 1 <<< "$others"), not the one built from your file(s)"
    echo "     ($tmp/bin/$step)"
    echo "     likely cause: main starts another build's program (exec) instead of training itself"
    continue
  fi
  case $rc in
    0)
      echo "PASS $claim"
      grep -v "^ok $name" "$tmp/out" | sed 's/^/     /'
      ;;
    77) echo "SKIP $claim: $(tail -n 1 "$tmp/out")" ;;
    124 | 137)
      failed=1
      echo "FAIL $claim: no result after $limit s: the job hung; likely a rank waits in a collective"
      echo "     that another rank never calls, or calls in another order"
      ;;
    *)
      failed=1
      if grep -q "^FAILED $name: " "$tmp/err"; then  # the runner's sentence, and what follows it
        sed -n "/^FAILED $name: /,\$p" "$tmp/err" | sed "1s/^FAILED $name: //" | head -n 15 |
          sed "1s/^/FAIL $claim: /; 2,\$s/^/     /"
      else  # the scenario itself stopped, e.g. on a metrics file that a rank never wrote
        echo "FAIL $claim: $(grep -v '^\s*$' "$tmp/err" | tail -n 1)"
        if grep -q "No such file.*jsonl" "$tmp/err"; then
          echo "     (a rank's metrics file is missing: each rank writes --metrics with its own rank in"
          echo "     the name, so under mpirun every process must know its rank)"
        fi
      fi
      ;;
  esac
done
if [ $failed = 0 ]; then
  if [ -z "$claims" ] && [ -z "$unit_src" ]; then
    echo "nothing was checked for $what: no unit test and no claim ran ($no_claims_why${no_unit_why:+; $no_unit_why})"
  elif [ -z "$claims" ]; then
    echo "all unit tests of $what pass; no claim ran ($no_claims_why)"
  else
    echo "all ${unit_src:+unit tests and }claims of $what pass"
  fi
  exit 0
fi
chapter=docs/${step}.md
[ "$exercise" = 07_clip ] && chapter=docs/hooks_and_clipping.md
echo "some ${unit_src:+unit tests or }claims of $what fail (the chapter $chapter explains each claim)"
exit 1
