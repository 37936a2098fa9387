# shellcheck shell=bash disable=SC2034  # rows and failed are read by the scripts that source this
# The verdicts of scripts/gpu_check.sh's table, kept apart so that a CPU test
# (tests/integration/gpu_verdict_test.sh) can feed them made-up logs. Sourced, not run.
#
# A row is a check's name and its verdict: "ok: ...", "FAILED: ..." or "SKIPPED: ...". Each verdict_*
# function reads what a run left (its log, its exit status) and prints one line, the state, a tab and
# the detail; `verdict NAME "$(verdict_... ARGS)"` adds the row. FAILED rows make gpu_check fail;
# SKIPPED rows (a check this machine cannot run) do not.

rows=()
failed=0
row() { rows+=("$(printf '%-52s %s' "$1" "$2")"); }
ok() { row "$1" "ok: $2"; }
fail() { row "$1" "FAILED: $2"; failed=1; }
skip() { row "$1" "SKIPPED: $2"; }
verdict() {  # name, then a line "ok|FAILED|SKIPPED<TAB>detail"
  local name=$1 line=$2
  case ${line%%$'\t'*} in
    ok) ok "$name" "${line#*$'\t'}" ;;
    SKIPPED) skip "$name" "${line#*$'\t'}" ;;
    *) fail "$name" "${line#*$'\t'}" ;;
  esac
}
say() { printf '%s\t%s\n' "$1" "$2"; }

# The loaded NCCL's device functions: scripts/nccl_caps.py's exit status and line; LIB empty when no
# libnccl.so.2 was found (then the build's NCCL line says why).
verdict_caps() {  # LIB RC LINE
  if [ -z "$1" ]; then say SKIPPED "no libnccl.so.2 found to check"
  elif [ "$2" -eq 0 ]; then say ok "${3#ok: }"
  else say FAILED "${3#MISSING: }"
  fi
}

# ctest -L gpu's log, without the dist_gpu_* tests (their own row). GoogleTest's tests are named
# Suite.Test; the others (nccl_bucket_order) have no dot. The row fails unless GoogleTest's binary
# ran: without GoogleTest, ctest -L gpu runs only the tests that are not GoogleTest's, and passes.
verdict_gpu_tests() {  # CTEST_LOG
  local lines gtest pass skip bad allowed=1
  lines=$(grep -E 'Test +#[0-9]+: ' "$1" | grep -vE 'Test +#[0-9]+: dist_gpu_')
  gtest=$(grep -cE 'Test +#[0-9]+: [A-Za-z0-9_]+\.[A-Za-z0-9_/]+ ' <<< "$lines")
  pass=$(grep -cE ' Passed' <<< "$lines")
  skip=$(grep -cE '\*\*\*Skipped' <<< "$lines")
  bad=$(grep -cE '\*\*\*(Failed|Timeout|Exception)| Not Run' <<< "$lines")
  # DeviceCuda.InitWithoutGpuDies skips by design when a GPU is present; the bucket-order test skips
  # where NCCL cannot put 2 ranks on this machine's GPUs (reported on its own row).
  grep -E 'nccl_bucket_order' <<< "$lines" | grep -q Skipped && allowed=2
  if [ "$gtest" -eq 0 ]; then
    say FAILED "GoogleTest missing: gpu_tests did not run (install libgtest-dev or set DDP_DEPS_PREFIX)"
  elif [ "$bad" -gt 0 ] || [ "$skip" -gt "$allowed" ]; then
    say FAILED "$pass passed, $bad failed, $skip skipped (a skip means no usable GPU)"
  else
    say ok "$pass passed, $skip skipped"
  fi
}

verdict_order() {  # CTEST_LOG NGPU: test_order_nccl at 2 ranks
  local line
  line=$(grep -E 'Test +#[0-9]+: nccl_bucket_order' "$1" | tail -1)
  if [ -z "$line" ]; then say FAILED "not built (needs NCCL)"
  elif [[ "$line" == *Passed* ]]; then say ok "all-reduce after the gradient, SGD after the all-reduce"
  elif [[ "$line" != *Skipped* ]]; then say FAILED "$(grep -m1 'FAILED' "$1" | cut -c1-140)"
  elif [ "$2" -eq 0 ]; then say FAILED "skipped: no GPU"
  else say SKIPPED "$(grep -m1 -o 'SKIPPED: .*' "$1" | cut -c10-120)"
  fi
}

# The reduce-scatter and in-place all-gather on GPU buffers (tests/gpu/test_dist_gpu.c): over NCCL at
# 2 and 3 ranks (skipped where NCCL cannot share this machine's GPUs), and over MPI through the host.
verdict_dist() {  # CTEST_LOG NGPU
  local lines pass skip bad
  lines=$(grep -E 'Test +#[0-9]+: dist_gpu_' "$1")
  pass=$(grep -c ' Passed' <<< "$lines")
  skip=$(grep -c '\*\*\*Skipped' <<< "$lines")
  bad=$(grep -cE '\*\*\*(Failed|Timeout|Exception)| Not Run' <<< "$lines")
  if [ -z "$lines" ]; then say FAILED "not built (needs NCCL or MPI)"
  elif [ "$bad" -gt 0 ]; then say FAILED "$bad failed: $(grep -m1 -E 'FAILED|ERROR' "$1" | cut -c1-120)"
  elif [ "$pass" -gt 0 ]; then say ok "$pass passed, $skip skipped (NCCL tests skip where NCCL cannot share the GPU)"
  elif [ "$2" -eq 0 ]; then say FAILED "skipped: no GPU"
  else say SKIPPED "every one skipped (NCCL cannot share the GPU, and no MPI)"
  fi
}

# A run bounded by `timeout` (exit status 124 when it had to stop it, 137 when it killed it).
verdict_run() {  # RC LOG DETAIL_IF_OK
  case $1 in
    0) say ok "$3" ;;
    124 | 137) say FAILED "still running after its time limit (timeout, exit $1): a hang" ;;
    *) say FAILED "$(first_error "$2")" ;;
  esac
}

first_error() {  # LOG: its first error line (the program's own, if any)
  local line
  line=$(grep -h -m1 -E '(^|\]:)error: |ERROR\]' "$1")
  [ -n "$line" ] || line=$(grep -h -iE 'error|failed|exit status' "$1" | tail -1)
  echo "${line:0:160}"
}

# Two ranks on one GPU without NCCL_MULTI_RANK_GPU_ENABLE must end with the trainer's explanation.
# SKIPPED where it cannot be run (no GPU: NGPU 0).
verdict_refusal() {  # NGPU RC LOG
  if [ "$1" -eq 0 ]; then say SKIPPED "no GPU"
  elif [ "$2" -eq 0 ]; then say FAILED "it ran: expected a refusal"
  elif [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; then say FAILED "it hung (timeout, exit $2): no refusal"
  elif grep -q "several ranks of this node are on the same GPU" "$3"; then say ok "refused with the explanation"
  else say FAILED "no explanation: $(first_error "$3")"
  fi
}

# NCCL's bootstrap on MASTER_ADDR=::1: SKIPPED where this machine cannot bind ::1 (BIND 1: it can).
verdict_ipv6() {  # BIND RC LOG
  if [ "$1" -ne 1 ]; then say SKIPPED "::1 cannot be bound here (no IPv6 loopback)"
  else verdict_run "$2" "$3" "NCCL_COMM_ID=[::1]:port"
  fi
}

ipv6_bindable() {  # prints 1 when a socket can be bound to ::1, else 0
  python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2> /dev/null && echo 1 || echo 0
}

table() {  # TITLE: the table, then the counts
  local all
  all=$(printf '%s\n' "${rows[@]}")
  echo "$1"
  printf '%-52s %s\n' "check" "result"
  printf '%s\n' "${rows[@]}"
  echo "# $(grep -c ' ok: ' <<< "$all") ok, $(grep -c ' FAILED: ' <<< "$all") failed," \
       "$(grep -c ' SKIPPED: ' <<< "$all") skipped"
}
