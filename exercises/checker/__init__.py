"""The workshop exercises' checker: its hint tables (hints.py), the 06_fault claims (claims.py), and the
proofs that it tells right solutions from wrong ones (wrong_solutions.py, right_solutions.py,
checker_cases.py; exe_record.c is preloaded by scripts/check_exercise.sh)."""
