#!/usr/bin/env bash
# scripts/gpu_check.sh's verdicts (scripts/gpu_verdict.sh, scripts/gpu_compare.py) fed made-up logs
# and metrics files, on a CPU: every row reads ok, FAILED and SKIPPED where it should, and a FAILED
# row, only a FAILED row, fails the check.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/gpu_verdict.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
expect() {  # STATE NAME LINE: the verdict line must start with STATE
  if [ "${3%%$'\t'*}" = "$1" ]; then
    echo "ok      $2: ${3/$'\t'/: }"
  else
    echo "WRONG   $2: expected $1, got '${3/$'\t'/: }'"
    bad=1
  fi
}
ctest_log() {  # FILE LINE...: a ctest -L gpu log with these result lines
  local f=$1; shift
  printf '%s\n' "Test project /b" "$@" "" "Total Test time (real) =   1.00 sec" > "$f"
}
P='  Passed    0.10 sec'
S='***Skipped   0.01 sec'
F='***Failed    0.20 sec'

# ---- the NCCL capability row ----
expect ok "caps" "$(verdict_caps /l/libnccl.so.2 0 'ok: /l/libnccl.so.2 carries all 17')"
expect FAILED "caps" "$(verdict_caps /l/libnccl.so.2 1 'MISSING: lacks ncclDevFunc_Reduce_Sum_f32')"
expect SKIPPED "caps" "$(verdict_caps '' 2 '')"

# ---- the gpu tests (GoogleTest) ----
ctest_log "$tmp/g_ok" "1/4 Test #1: OpsCuda.Gemm ....   $P" "2/4 Test #2: DeviceCuda.InitWithoutGpuDies ... $S" \
  "3/4 Test #3: nccl_bucket_order ...   $P" "4/4 Test #4: dist_gpu_nccl_np2 ...   $F"
expect ok "gpu tests" "$(verdict_gpu_tests "$tmp/g_ok")"  # dist_gpu_* is another row's
ctest_log "$tmp/g_nogtest" "1/1 Test #1: nccl_bucket_order ...   $P"
line=$(verdict_gpu_tests "$tmp/g_nogtest")
expect FAILED "gpu tests, no GoogleTest" "$line"
[[ "$line" == *"GoogleTest missing"* ]] || { echo "WRONG   gpu tests: no 'GoogleTest missing'"; bad=1; }
ctest_log "$tmp/g_fail" "1/2 Test #1: OpsCuda.Gemm ...   $F" "2/2 Test #2: OpsCuda.Relu ...   $P"
expect FAILED "gpu tests, one failed" "$(verdict_gpu_tests "$tmp/g_fail")"
ctest_log "$tmp/g_noGPU" "1/2 Test #1: OpsCuda.Gemm ... $S" "2/2 Test #2: OpsCuda.Relu ... $S"
expect FAILED "gpu tests, all skipped (no GPU)" "$(verdict_gpu_tests "$tmp/g_noGPU")"

# ---- the bucket order and the collectives on GPU buffers ----
expect ok "order" "$(verdict_order "$tmp/g_ok" 1)"
expect FAILED "order, not built" "$(verdict_order "$tmp/g_fail" 1)"
ctest_log "$tmp/o_skip" "1/1 Test #1: nccl_bucket_order ... $S" "SKIPPED: NCCL 2.28 cannot put 2 ranks on one GPU"
expect SKIPPED "order, NCCL cannot share" "$(verdict_order "$tmp/o_skip" 1)"
expect FAILED "order, skipped without a GPU" "$(verdict_order "$tmp/o_skip" 0)"
ctest_log "$tmp/d_ok" "1/2 Test #1: dist_gpu_nccl_np2 ...   $P" "2/2 Test #2: dist_gpu_mpi_np3 ... $S"
expect ok "dist" "$(verdict_dist "$tmp/d_ok" 1)"
expect FAILED "dist, one failed" "$(verdict_dist "$tmp/g_ok" 1)"
ctest_log "$tmp/d_skip" "1/1 Test #1: dist_gpu_nccl_np2 ... $S"
expect SKIPPED "dist, all skipped" "$(verdict_dist "$tmp/d_skip" 1)"
expect FAILED "dist, not built" "$(verdict_dist "$tmp/g_nogtest" 1)"

# ---- a run, the refusal of two ranks on one GPU, the IPv6 bootstrap ----
echo "[NCCL ERROR] rank 1 at dist_nccl.c:42: unhandled system error" > "$tmp/run_fail"
expect ok "run" "$(verdict_run 0 "$tmp/run_fail" "done")"
line=$(verdict_run 1 "$tmp/run_fail" "")
expect FAILED "run, exit 1" "$line"
[[ "$line" == *"NCCL ERROR"* ]] || { echo "WRONG   run: the error line is not quoted"; bad=1; }
expect FAILED "run, timed out" "$(verdict_run 124 "$tmp/run_fail" "")"
echo "error: rank 0: several ranks of this node are on the same GPU (GPU 0; ...)" > "$tmp/refused"
expect ok "refusal" "$(verdict_refusal 1 1 "$tmp/refused")"
expect FAILED "refusal, it ran" "$(verdict_refusal 1 0 "$tmp/refused")"
expect FAILED "refusal, NCCL's own words" "$(verdict_refusal 1 1 "$tmp/run_fail")"
expect FAILED "refusal, hung" "$(verdict_refusal 1 124 "$tmp/refused")"
expect SKIPPED "refusal, no GPU" "$(verdict_refusal 0 0 /dev/null)"
expect ok "ipv6" "$(verdict_ipv6 1 0 "$tmp/run_fail")"
expect FAILED "ipv6" "$(verdict_ipv6 1 1 "$tmp/run_fail")"
expect SKIPPED "ipv6, ::1 not bindable" "$(verdict_ipv6 0 0 /dev/null)"
case $(ipv6_bindable) in 0 | 1) ;; *) echo "WRONG   ipv6_bindable: not 0 or 1"; bad=1 ;; esac

# ---- the comparisons of metrics files ----
metrics() {  # FILE DIGEST LOSS...
  local f=$1 d=$2 k=0 l; shift 2
  : > "$f"
  for l in "$@"; do
    k=$((k + 1))
    echo "{\"type\": \"step\", \"step\": $k, \"epoch\": 0, \"loss\": $l}" >> "$f"
  done
  echo '{"type": "epoch", "epoch": 0, "test_acc": 0.5}' >> "$f"
  echo "{\"type\": \"final\", \"world_size\": 1, \"param_digest\": \"$d\"}" >> "$f"
}
cmp() { python3 "$root/scripts/gpu_compare.py" "$@"; }
metrics "$tmp/a_0.jsonl" 00aa 2.3 2.2 2.1
metrics "$tmp/a_1.jsonl" 00aa 2.3 2.2 2.1
metrics "$tmp/b_0.jsonl" 00bb 2.3 2.2 2.1000001
expect ok "same, identical" "$(cmp same "$tmp/a_0.jsonl" "$tmp/a_1.jsonl" 0)"
expect FAILED "same, one loss differs" "$(cmp same "$tmp/a_0.jsonl" "$tmp/b_0.jsonl" 0)"
expect ok "same, within 1e-5" "$(cmp same "$tmp/a_0.jsonl" "$tmp/b_0.jsonl" 1e-5)"
expect FAILED "same, its run failed" "$(cmp same "$tmp/a_0.jsonl" "$tmp/none.jsonl" 0)"
expect ok "replicas" "$(cmp replicas "$tmp/a_" 2)"
cp "$tmp/b_0.jsonl" "$tmp/c_0.jsonl"; cp "$tmp/a_1.jsonl" "$tmp/c_1.jsonl"
expect FAILED "replicas, digests differ" "$(cmp replicas "$tmp/c_" 2)"
expect ok "digest" "$(cmp digest "$tmp/a_0.jsonl" "$tmp/a_1.jsonl")"
expect FAILED "digest" "$(cmp digest "$tmp/a_0.jsonl" "$tmp/b_0.jsonl")"
expect FAILED "gpu_cpu, too few steps" "$(cmp gpu_cpu "$tmp/a_0.jsonl" "$tmp/b_0.jsonl" 10 1e-4 0.02)"
expect ok "gpu_cpu" "$(cmp gpu_cpu "$tmp/a_0.jsonl" "$tmp/b_0.jsonl" 3 1e-4 0.02)"
echo '{"traceEvents": [{"ph": "X", "name": "backward", "dur": 5}, {"ph": "X", "name": "all-reduce b0", "dur": 3}]}' > "$tmp/t.json"
expect ok "trace" "$(cmp trace "$tmp/t.json")"
echo '{"traceEvents": [{"ph": "X", "name": "backward", "dur": 5}]}' > "$tmp/t0.json"
expect FAILED "trace, no all-reduce" "$(cmp trace "$tmp/t0.json")"

# ---- the table: rows of every state, and only FAILED ones fail ----
rows=() failed=0
verdict "a" "$(verdict_caps /l 0 'ok: x')"
verdict "b" "$(verdict_ipv6 0 0 /dev/null)"
[ $failed -eq 0 ] || { echo "WRONG   table: a SKIPPED row failed the check"; bad=1; }
verdict "c" "$(verdict_run 1 "$tmp/run_fail" "")"
[ $failed -eq 1 ] || { echo "WRONG   table: a FAILED row did not fail the check"; bad=1; }
t=$(table "# title")
for want in "^a +ok: x$" "^b +SKIPPED: " "^c +FAILED: " "^# 1 ok, 1 failed, 1 skipped$"; do
  grep -qE "$want" <<< "$t" || { echo "WRONG   table: no line matching '$want' in:"; echo "$t"; bad=1; }
done
[ $bad -eq 0 ] && echo "every verdict as expected"
exit $bad
