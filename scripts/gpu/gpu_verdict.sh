# shellcheck shell=bash disable=SC2034  # rows and failed are read by the scripts that source this
# The verdicts of scripts/gpu/gpu_check.sh's table, kept apart so that a CPU test
# (tests/integration/gpu_verdict_test.sh) can feed them made-up logs. Sourced, not run.
#
# A row is a check's name and its verdict: "ok: ...", "FAILED: ..." or "SKIPPED: ...". Each verdict_*
# function reads what a run left (its log, its exit status) and prints one line, the state, a tab and
# the detail; `verdict NAME "$(verdict_... ARGS)"` adds the row. FAILED rows make gpu_check fail;
# SKIPPED rows (a check this machine cannot run) do not.

rows=()
failed=0
SUMMARY=""  # when set: the file each row is appended to the moment it is decided
ECHO_ROWS=""  # when set: each row is also printed on stdout as it is decided (progress)
forced=""   # when set ("STATE<TAB>detail"): every row takes this verdict instead (a check not run)
row() {  # NAME RESULT: the row, kept, appended to $SUMMARY and printed as it comes
  local line
  line=$(printf '%-52s %s' "$1" "$2")
  rows+=("$line")
  [ -z "$SUMMARY" ] || printf '%s\n' "$line" >> "$SUMMARY"
  [ -z "$ECHO_ROWS" ] || printf '%s\n' "$line"
}
state_row() {  # NAME STATE DETAIL, or the forced verdict
  [ -z "$forced" ] || set -- "$1" "${forced%%$'\t'*}" "${forced#*$'\t'}"
  case $2 in
    ok) row "$1" "ok: $3" ;;
    SKIPPED) row "$1" "SKIPPED: $3" ;;
    *) row "$1" "FAILED: $3"; failed=1 ;;
  esac
}
ok() { state_row "$1" ok "$2"; }
fail() { state_row "$1" FAILED "$2"; }
skip() { state_row "$1" SKIPPED "$2"; }
verdict() {  # name, then a line "ok|FAILED|SKIPPED<TAB>detail"
  local line=$2
  state_row "$1" "${line%%$'\t'*}" "${line#*$'\t'}"
}
say() { printf '%s\t%s\n' "$1" "$2"; }

# The loaded NCCL's device functions: scripts/gpu/nccl_caps.py's exit status and line; LIB empty when no
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
# The row is about NCCL: when every NCCL case skipped it is SKIPPED "NCCL not tested", whatever the MPI
# case did (an MPI pass says nothing of NCCL's reduce-scatter).
verdict_dist() {  # CTEST_LOG NGPU
  local lines nccl npass nskip mpass bad
  lines=$(grep -E 'Test +#[0-9]+: dist_gpu_' "$1")
  nccl=$(grep -E ': dist_gpu_nccl' <<< "$lines")
  npass=$(grep -c ' Passed' <<< "$nccl")
  nskip=$(grep -c '\*\*\*Skipped' <<< "$nccl")
  mpass=$(grep -E ': dist_gpu_mpi' <<< "$lines" | grep -c ' Passed')
  bad=$(grep -cE '\*\*\*(Failed|Timeout|Exception)| Not Run' <<< "$lines")
  if [ -z "$lines" ]; then say FAILED "not built (needs NCCL or MPI)"
  elif [ "$bad" -gt 0 ]; then say FAILED "$bad failed: $(grep -m1 -E 'FAILED|ERROR' "$1" | cut -c1-120)"
  elif [ -z "$nccl" ]; then say FAILED "no NCCL case built (MPI: $mpass passed)"
  elif [ "$npass" -gt 0 ]; then say ok "NCCL: $npass passed, $nskip skipped; MPI through the host: $mpass passed"
  elif [ "$2" -eq 0 ]; then say FAILED "skipped: no GPU"
  else say SKIPPED "NCCL not tested: every NCCL case skipped (NCCL cannot share the GPU); MPI: $mpass passed"
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

# ---- section 5: several ranks -------------------------------------------------------------------------
# The world sizes of section 5 on a node of NGPU GPUs with the NCCL of version code NCCL (e.g. 22809):
# np in {2, 4, NGPU}, each on its own GPU when np <= NGPU; above NGPU only with NCCL >= 2.30, and then
# every rank on GPU 0 (the trainers refuse more ranks than GPUs unless they see exactly one). Prints
# one line "NP K" (K: the GPUs used) per world size; nothing when none can run. On a node of 2 or more
# GPUs the whole node comes first (what such a node reports; a deadline drops the last ones), then the
# others, smallest first.
multi_rank_plan() {  # NGPU NCCL
  local np first=""
  [ "$1" -ge 2 ] && first=$1
  for np in $first $(printf '%s\n' 2 4 "$1" | sort -nu | grep -vx "${first:-x}"); do
    if [ "$np" -lt 2 ]; then continue
    elif [ "$np" -le "$1" ]; then echo "$np $np"
    elif [ "$2" -ge 23000 ] && [ "$1" -ge 1 ]; then echo "$np 1"
    fi
  done
}
ranks_on() {  # NP K: "4 ranks on 1 GPU", the name of section 5's rows
  local g=GPUs
  [ "$2" -eq 1 ] && g=GPU
  echo "$1 ranks on $2 $g"
}
# A "replicas identical" row is a check only where the ranks could disagree: steps 04-06 keep a
# replica per rank. Steps 07 and 08 gather every parameter before the digest hashes it, so their
# digests agree by construction; their check is "= step 06".
replicas_row() {  # STEP: true when its "replicas identical" row can fail
  case $1 in 04 | 05 | 06) return 0 ;; *) return 1 ;; esac
}

# The 2-rank NCCL smoke test and the probe table (tools/probe.c): every rank prints "[host rank R/W
# ...] ok", then "# #wrong in all: 0 OK" and the table. FAILED with the reason: our error line, else
# NCCL's first WARN (NCCL_DEBUG=INFO), else the last line; a hang when `timeout` ended it.
verdict_probe() {  # RC LOG W
  local good why bw
  good=$(grep -cE '^\[.* rank [0-9]+/'"$3"' .*\] ok$' "$2")
  case $1 in
    0)
      bw=$(grep -h -m1 'Avg bus bandwidth' "$2" | sed 's/^# *//')
      if [ "$good" -eq "$3" ] && grep -q '#wrong in all: 0 OK' "$2"; then
        say ok "$3 ranks all-reduce correctly${bw:+; $bw}; $(grep -h -m1 '^# backend' "$2" | cut -c3-80)"
      else
        say FAILED "exit 0 but $good of $3 ranks ok: $(grep -h -m1 -E 'broken|FAILED' "$2" | cut -c1-120)"
      fi ;;
    124 | 137) say FAILED "no answer within its time limit (timeout, exit $1): a hang; $(nccl_warn "$2")" ;;
    *)
      why=$(grep -h -m1 -E '(^|\]:)error: |ERROR\]' "$2")
      [ -n "$why" ] || why=$(nccl_warn "$2")
      [ -n "$why" ] || why=$(grep -v '^$' "$2" | tail -1)
      say FAILED "exit $1: ${why:0:160}" ;;
  esac
}
nccl_warn() { grep -h -m1 'NCCL WARN' "$1" | sed 's/.*NCCL WARN */NCCL WARN /' | cut -c1-140; }

# ---- the deadline (DDP_GPU_DEADLINE) -------------------------------------------------------------------
# A section gets a share of the deadline in proportion to its estimated time; it starts only when at
# least its share is left. True (0) when it may start.
section_may_start() {  # LEFT DEADLINE EST TOTAL_EST (seconds)
  [ "$1" -ge 1 ] && [ $(($1 * $4)) -ge $(($2 * $3)) ]
}

tally() { # the counts of the rows so far
  local all
  all=$(printf '%s\n' "${rows[@]}")
  echo "# $(grep -c ' ok: ' <<< "$all") ok, $(grep -c ' FAILED: ' <<< "$all") failed," \
       "$(grep -c ' SKIPPED: ' <<< "$all") skipped"
}
table() {  # TITLE: the table, then the counts
  echo "$1"
  printf '%-52s %s\n' "check" "result"
  printf '%s\n' "${rows[@]}"
  tally
}
