#!/usr/bin/env bash
# Proves that scripts/check_exercise.sh can tell a solution from an unsolved or wrong one (CTest
# `exercise_checker_0N`, `exercise_checker_06_fault`):
#   exercises/selftest.sh N CLAIM [CLAIM...]      (N: 02..08, or an extra exercise such as 06_fault)
# step N's own files must pass every unit test and claim; the untouched exercise must fail, naming
# each CLAIM; and every typical wrong solution of tests/exercises/wrong_solutions.py must fail with
# its diagnosis.
set -uo pipefail
cd "$(dirname "$0")/.."
n=$1
shift
step=$(basename "$(ls -d steps/"${n:0:2}"_*)")
folder=$step  # an extra exercise (06_fault) has a folder of its own, from its step's files
[ "$n" = "${n:0:2}" ] || folder=$n
files=(exercises/"$folder"/*.c)
reference=("${files[@]/#"exercises/$folder"/"steps/$step"}")

echo "== the reference solution: scripts/check_exercise.sh $n ${reference[*]}"
scripts/check_exercise.sh "$n" "${reference[@]}"
rc=$?
[ $rc -eq 0 ] || { echo "selftest: the reference solution of exercise $n should pass, but exit status is $rc" >&2; exit 1; }

echo "== the untouched exercise: scripts/check_exercise.sh $n ${files[*]}"
out=$(scripts/check_exercise.sh "$n" "${files[@]}")
rc=$?
echo "$out"
[ $rc -eq 1 ] || { echo "selftest: the untouched exercise should fail (exit 1), but exit status is $rc" >&2; exit 1; }
for claim in "$@"; do
  grep -q "^FAIL $claim: " <<< "$out" || { echo "selftest: expected 'FAIL $claim: ...' above" >&2; exit 1; }
done
echo "== the typical wrong solutions: tests/exercises/wrong_solutions.py $n"
python3 tests/exercises/wrong_solutions.py "$n" || { echo "selftest: a wrong solution of exercise $n was not rejected as it should be" >&2; exit 1; }
echo "selftest: exercise $n's checker passes the reference, fails the untouched exercise on: $*, and rejects every typical wrong solution"
