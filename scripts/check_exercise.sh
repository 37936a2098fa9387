#!/usr/bin/env bash
# Builds a learner's version of a step and runs, on it, the unit tests of the stage's own code (03:
# the sampler, 06: the reducer) and the step's integration claims.
#
#   scripts/check_exercise.sh N FILE [FILE...]
#   scripts/check_exercise.sh --build-only N FILE [FILE...]   compile and link only
#
# N is the step (02 .. 07). Each FILE replaces the step's file of the same name (train.c, sampler.c,
# reducer.c); the step's other files are used as they are. The program is compiled and linked exactly
# as the main build compiles the step (the commands come from `ninja -t commands`, so the flags and
# the ddp_common library are the build's own), into a temporary folder, under the step's name, next
# to links to the main build's other step programs. Then tests/integration/check.py runs the step's
# claims with DDP_BIN_DIR pointing there, and this prints PASS or FAIL per claim, with check.py's
# reason for a failure and its likely cause. Every run gets --timeout $DDP_RUN_TIMEOUT (15 s), so that
# a collective which some rank never reaches ends the job quickly and is reported as a hang.
#
# Unit tests (03, 06): the GoogleTest binary of the main build (unit_tests) is linked again with the
# learner's sampler.c or reducer.c in place of the step's, that file compiled with AddressSanitizer
# and UBSan when the compiler has them (a read past the end of an array then fails the test even when
# the value read happens to be right), and its Sampler* or Reducer* tests run. Steps 02, 04 and 05
# teach code that lives in train.c, and step 07's reducer has no unit tests of its own (the Reducer*
# tests are step 06's): their integration claims are their tests.
#
# Exit status: 0 when every unit test and claim passes, 1 otherwise, 2 on a usage error.
#
# Environment: DDP_BUILD_DIR  the configured Ninja build to borrow from (default: build)
#              DDP_CHECK_TIMEOUT  seconds per claim before it counts as hung (default 300)
#              DDP_RUN_TIMEOUT    --timeout of every run: a collective's longest wait (default 15)
#              DDP_CLAIMS     run these claims instead of the step's list (space-separated; "none")
#              DDP_UNIT       0: skip the unit tests
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() { echo "usage: $0 N FILE [FILE...]   (N = 02..07; e.g. $0 03 exercises/03_sampler/sampler.c)" >&2; exit 2; }
build_only=0
[ "${1:-}" = --build-only ] && { build_only=1; shift; }
[ $# -ge 2 ] || usage
n=$1
shift
case $n in 2 | 3 | 4 | 5 | 6 | 7) n=0$n ;; 02 | 03 | 04 | 05 | 06 | 07) ;; *) usage ;; esac

case $n in
  02) claims="step02_redundant" ;;
  03) claims="step03_drift" ;;
  04) claims="step04_replicas_np2 step04_matches_baseline_np2 step04_broadcast" ;;
  05) claims="step05_replicas_np2 step05_matches_baseline_np2 step05_eval_exact step05_one_writer step05_resume" ;;
  06) claims="step06_replicas_np2 step06_matches_step04_np2 step06_grad_accum step06_trace" ;;
  07) claims="step07_replicas_np2 step07_replicas_np3 step07_matches_step06_np2 step07_matches_step06_np3
              step07_memory step07_checkpoints" ;;
esac
claims=${DDP_CLAIMS:-$claims}
[ "$claims" = none ] && claims=""
# The unit tests of the stage's own code: (the step's source file they test, gtest filter)
case $n in
  03) unit_src=sampler.c unit_filter='Sampler*' ;;
  06) unit_src=reducer.c unit_filter='Reducer*' ;;
  *) unit_src="" unit_filter="" ;;
esac
[ "${DDP_UNIT:-1}" = 0 ] && unit_src=""

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
# shellcheck disable=SC2086
if ! cmake --build "$build" --target ddp_common $targets > "$tmp/build.log" 2>&1; then
  echo "FAIL build: the main build in $build does not build; fix that first:" >&2
  tail -n 20 "$tmp/build.log" >&2
  exit 1
fi
cmds=$(cd "$build" && ninja -t commands "$step") || { echo "$0: ninja does not know target $step" >&2; exit 2; }
objdir="CMakeFiles/$step.dir/steps/$step/"
compile=$(printf '%s\n' "$cmds" | grep -F -- "-c $step_src/")
link=$(printf '%s\n' "$cmds" | grep -F -- "-o bin/$step ")
if [ -z "$compile" ] || [ -z "$link" ]; then
  echo "$0: could not find the compile and link commands of $step in $build" >&2
  exit 2
fi
ok=1
while IFS= read -r cmd; do
  cmd=${cmd//"$step_src/"/"$tmp/src/"}
  cmd=${cmd//"$objdir"/"$tmp/obj/"}
  (cd "$build" && bash -c "$cmd") >> "$tmp/compile.log" 2>&1 || ok=0
done <<< "$compile"
if [ $ok = 1 ]; then
  cmd=${link//"$objdir"/"$tmp/obj/"}
  cmd=${cmd//"-o bin/$step "/"-o $tmp/bin/$step "}
  (cd "$build" && bash -c "$cmd") >> "$tmp/compile.log" 2>&1 || ok=0
fi
if [ $ok = 0 ]; then
  echo "FAIL build: $step does not compile or link with your file(s):"
  sed "s|$tmp/src/|$step/|g" "$tmp/compile.log" | head -n 40
  exit 1
fi
if [ -s "$tmp/compile.log" ]; then
  echo "compiler warnings:"
  sed "s|$tmp/src/|$step/|g" "$tmp/compile.log" | head -n 20
fi
if [ $build_only = 1 ]; then
  echo "built $step"
  exit 0
fi
for prog in "$build"/bin/[0-9][0-9]_*; do
  [ "$(basename "$prog")" = "$step" ] || ln -s "$prog" "$tmp/bin/"
done

failed=0
# The stage's unit tests, with the learner's $unit_src linked into the main build's unit_tests.
if [ -n "$unit_src" ]; then
  ucmds=$(cd "$build" && ninja -t commands unit_tests 2>/dev/null)
  ucompile=$(printf '%s\n' "$ucmds" | grep -F -- "-c $step_src/$unit_src")
  ulink=$(printf '%s\n' "$ucmds" | grep -F -- "-o bin/unit_tests ")
  if [ -z "$ucompile" ] || [ -z "$ulink" ] || ! cmake --build "$build" --target unit_tests > "$tmp/ubuild.log" 2>&1; then
    echo "SKIP unit tests: the build has no unit_tests (GoogleTest missing?)"
    unit_src=""
  fi
fi
if [ -n "$unit_src" ]; then
  uobj=$(printf '%s\n' "$ucompile" | sed -n 's/.* -o \([^ ]*\) .*/\1/p')
  sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
  build_unit() {  # $1: extra compile and link flags
    local c=${ucompile//"$step_src/$unit_src"/"$tmp/src/$unit_src"} l=$ulink
    c=${c//"$uobj"/"$tmp/unit_$unit_src.o"}
    c=${c/" -c "/" $1 -c "}
    l=${l//"$uobj"/"$tmp/unit_$unit_src.o"}
    l=${l//"-o bin/unit_tests "/"$1 -o $tmp/unit_tests "}
    (cd "$build" && bash -c "$c" && bash -c "$l") > "$tmp/ucompile.log" 2>&1
  }
  with="with AddressSanitizer and UBSan"
  if ! build_unit "$sanitize"; then
    with="without sanitizers (this compiler cannot build with -fsanitize=address,undefined)"
    build_unit "" || { echo "FAIL build: the unit tests do not link with your $unit_src:"; head -n 20 "$tmp/ucompile.log"; exit 1; }
  fi
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 OPENBLAS_NUM_THREADS=1 \
    timeout -k 5 120 "$tmp/unit_tests" --gtest_filter="$unit_filter" > "$tmp/unit.out" 2>&1
  urc=$?
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
for t in failed:
    print(f"FAIL unit {t}" + (f" ({where[t]})" if t in where else "") + ":")
    print(f"     {causes.get(t, 'see the test in tests/unit/ for what it checks')}")
if san or not failed:
    t = tests[-1] if tests else "?"
    print(f"FAIL unit {t}: " + ("; ".join(san[:2]) if san else f"the test program ended with status {rc}"))
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
limit=${DDP_CHECK_TIMEOUT:-300}
for claim in $claims; do
  timeout -k 10 "$limit" python3 "$root/tests/integration/check.py" "$claim" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  case $rc in
    0)
      echo "PASS $claim"
      grep -v "^ok $claim" "$tmp/out" | sed 's/^/     /'
      ;;
    77) echo "SKIP $claim: $(tail -n 1 "$tmp/out")" ;;
    124 | 137)
      failed=1
      echo "FAIL $claim: no result after $limit s: the job hung; likely a rank waits in a collective"
      echo "     that another rank never calls, or calls in another order"
      ;;
    *)
      failed=1
      if grep -q "^FAILED $claim: " "$tmp/err"; then  # check.py's sentence, and what follows it
        sed -n "/^FAILED $claim: /,\$p" "$tmp/err" | sed "1s/^FAILED $claim: //" | head -n 15 |
          sed "1s/^/FAIL $claim: /; 2,\$s/^/     /"
      else  # check.py itself stopped, e.g. on a metrics file that a rank never wrote
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
  echo "all ${unit_src:+unit tests and }claims of step $n pass"
  exit 0
fi
echo "some ${unit_src:+unit tests or }claims of step $n fail (the chapter docs/${step}.md explains each claim)"
exit 1
