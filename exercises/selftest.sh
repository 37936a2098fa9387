#!/usr/bin/env bash
# Proves that scripts/check_exercise.sh can tell a solution from an unsolved or wrong one (CTest
# `exercise_checker_0N`, `exercise_checker_06_fault`):
#   exercises/selftest.sh N CLAIM [CLAIM...]      (N: 02..09, or an extra exercise such as 06_fault)
# step N's own files must pass the unit tests and the claims below; the untouched exercise must fail,
# naming each CLAIM; and every typical wrong solution of exercises/checker/wrong_solutions.py must fail
# with its diagnosis.
#
# What runs where, so that nothing is proven twice: the step's own files run, in the checker, the
# unit tests, the stepNN_own_binary claim (the program that runs is the one the checker built) and
# every CLAIM@launch (the checker's launch.sh path). Every other claim, the CLAIMs included, is a test
# of the main suite (tests/integration/tests.cmake): the same scenario (python3 -m tests.harness) on
# the same sources, compiled with the same commands (the checker takes them from `ninja -t commands`):
# run here again on the step's files, it would prove nothing new. (That the checker passes correct
# files through its claims is also shown by exercises/checker/right_solutions.py, on files written
# otherwise than the step.) The untouched exercise runs only the CLAIMs, the claims this test asserts
# on: each must fail. The wrong solutions run as exercises/checker/wrong_solutions.py says (each with
# the claims that catch it). A time per part is printed ([Ns]).
set -uo pipefail
cd "$(dirname "$0")/.."
n=$1
shift
step=$(basename "$(ls -d steps/"${n:0:2}"_*)")
folder=$step  # an extra exercise (06_fault) has a folder of its own, from its step's files
[ "$n" = "${n:0:2}" ] || folder=$n
files=(exercises/"$folder"/*.c)
reference=("${files[@]/#"exercises/$folder"/"steps/$step"}")
all=$(scripts/check_exercise.sh --claims "$n") || exit 2
# The main build's reference runs, the same in all three parts below, run once and are replayed after
# (tests/harness/cache.py says when a run is the same): in DDP_REFERENCE_CACHE when it is set (CTest
# sets one folder for all the checker's tests), else in a folder of this run's own.
if [ -z "${DDP_REFERENCE_CACHE:-}" ]; then
  DDP_REFERENCE_CACHE=$(mktemp -d "${TMPDIR:-/tmp}/selftest_$n.XXXXXX") || exit 2
  trap 'rm -rf "$DDP_REFERENCE_CACHE"' EXIT
fi
mkdir -p "$DDP_REFERENCE_CACHE" || exit 2
export DDP_REFERENCE_CACHE
ref_claims="step${n:0:2}_own_binary"
for c in $all; do
  [[ $c == *@* ]] && ref_claims+=" $c"
done

echo "[${SECONDS}s] == the reference solution: DDP_CLAIMS=\"$ref_claims\" scripts/check_exercise.sh $n ${reference[*]}"
DDP_CLAIMS=$ref_claims scripts/check_exercise.sh "$n" "${reference[@]}"
rc=$?
[ $rc -eq 0 ] || { echo "selftest: the reference solution of exercise $n should pass, but exit status is $rc" >&2; exit 1; }

echo "[${SECONDS}s] == the untouched exercise: DDP_CLAIMS=\"$*\" scripts/check_exercise.sh $n ${files[*]}"
out=$(DDP_CLAIMS="$*" scripts/check_exercise.sh "$n" "${files[@]}")
rc=$?
echo "$out"
[ $rc -eq 1 ] || { echo "selftest: the untouched exercise should fail (exit 1), but exit status is $rc" >&2; exit 1; }
for claim in "$@"; do
  grep -q "^FAIL $claim: " <<< "$out" || { echo "selftest: expected 'FAIL $claim: ...' above" >&2; exit 1; }
done
echo "[${SECONDS}s] == the typical wrong solutions: python3 -m exercises.checker.wrong_solutions $n"
python3 -m exercises.checker.wrong_solutions "$n" || { echo "selftest: a wrong solution of exercise $n was not rejected as it should be" >&2; exit 1; }
echo "[${SECONDS}s] selftest: exercise $n's checker passes the reference, fails the untouched exercise on: $*, and rejects every typical wrong solution"
