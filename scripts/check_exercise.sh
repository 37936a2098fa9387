#!/usr/bin/env bash
# Builds a learner's version of a step and runs that step's integration claims on it.
#
#   scripts/check_exercise.sh N FILE [FILE...]
#   scripts/check_exercise.sh --build-only N FILE [FILE...]   compile and link only
#
# N is the step (02 .. 06). Each FILE replaces the step's file of the same name (train.c, sampler.c,
# reducer.c); the step's other files are used as they are. The program is compiled and linked exactly
# as the main build compiles the step (the commands come from `ninja -t commands`, so the flags and
# the ddp_common library are the build's own), into a temporary folder, under the step's name, next
# to links to the main build's other step programs. Then tests/integration/check.py runs the step's
# claims with DDP_BIN_DIR pointing there, and this prints PASS or FAIL per claim, with check.py's
# reason for a failure. Exit status: 0 when every claim passes, 1 otherwise, 2 on a usage error.
#
# Environment: DDP_BUILD_DIR  the configured Ninja build to borrow from (default: build)
#              DDP_CHECK_TIMEOUT  seconds per claim before it counts as hung (default 300)
#              DDP_CLAIMS     run these claims instead of the step's list (space-separated)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() { echo "usage: $0 N FILE [FILE...]   (N = 02..06; e.g. $0 03 exercises/03_sampler/sampler.c)" >&2; exit 2; }
build_only=0
[ "${1:-}" = --build-only ] && { build_only=1; shift; }
[ $# -ge 2 ] || usage
n=$1
shift
case $n in 2 | 3 | 4 | 5 | 6) n=0$n ;; 02 | 03 | 04 | 05 | 06) ;; *) usage ;; esac

case $n in
  02) claims="step02_redundant" ;;
  03) claims="step03_drift" ;;
  04) claims="step04_replicas_np2 step04_matches_baseline_np2 step04_broadcast" ;;
  05) claims="step05_replicas_np2 step05_matches_baseline_np2 step05_eval_exact step05_resume" ;;
  06) claims="step06_replicas_np2 step06_matches_step04_np2 step06_grad_accum step06_trace" ;;
esac
claims=${DDP_CLAIMS:-$claims}

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

# Run the claims, as CTest would (tests/integration/tests.cmake sets the same environment).
# shellcheck source=scripts/mpi_env.sh
source "$root/scripts/mpi_env.sh"
export DDP_BIN_DIR=$tmp/bin DDP_MPIEXEC=${DDP_MPIEXEC:-mpiexec}
limit=${DDP_CHECK_TIMEOUT:-300}
failed=0
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
      echo "FAIL $claim: no result after $limit s: a rank is probably waiting in a collective that"
      echo "     another rank never calls, or calls in another order"
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
  echo "all claims of step $n pass"
  exit 0
fi
echo "some claims of step $n fail (the chapter docs/${step}.md explains each claim)"
exit 1
