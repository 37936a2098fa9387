#!/usr/bin/env bash
# scripts/gpu/gpu_check.sh itself on a CPU, with a stand-in for the GPU programs (no build, no GPU):
# DDP_GPU_REUSE_BUILD=1 on a folder whose bin/ holds one small script under every program's name,
# which sleeps STUB_SLEEP seconds and fails (gpu_count prints STUB_GPUS), and nvidia-smi and
# torchrun stand-ins on PATH. Scenarios:
#   killed    SIGTERM while the smoke test's run is in flight: the summary keeps the rows decided so
#             far and says where it stopped, the logs are packed, the run's processes are gone, and
#             it ends at once (not when the run would have), with status 143;
#   interrupted  the same with SIGINT, to the script started in the background (where a shell
#             ignores SIGINT): status 130;
#   deadline  DDP_GPU_DEADLINE=20 with runs that would take longer: it ends by itself with the whole
#             table, the sections it could not reach SKIPPED "deadline";
#   smoke     2 GPUs and a probe that fails: every multi-rank row FAILED "multi-rank NCCL does not
#             work here", and none of those runs was started;
#   hung      nvidia-smi hangs (a wedged GPU) under DDP_GPU_DEADLINE=8: its row FAILED "did not
#             answer", and the script ends by itself within the deadline (its own clock, the last line);
#   hung_killed  nvidia-smi hangs, no deadline: SIGTERM while it hangs ends the script at once (guard:
#             10 s; nvidia-smi would be waited for 20 s), status 143, the hung nvidia-smi gone;
#   nccl_choice  an NCCL carried in DEPS_DIR and a stock one (the toolkit's, or a stand-in wheel): 2 GPUs
#             take the stock one, 1 GPU the carried one, and the summary's "# NCCL chosen:" says so.
#   hooks     section 5b (step 06's hooks, clipping in 06-08, --check_finite, 2 ranks on 2 GPUs) with
#             stand-in trainers that succeed and write metrics and traces: every row of 5b ok; then
#             again with each condition broken (STUB_BROKEN=1: rank 1's replica apart under a hook or
#             clipping, PowerSGD's spans from unrecorded events, 07 and 08 logging a local norm, the NaN
#             unseen), every row of 5b FAILED, saying why.
# No timing is asserted: the guards below only stop a hung script (generous, 60 s). SHOW=1 prints
# the summary and the output even when every check holds.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
scenario=${1:?usage: gpu_check_test.sh killed|interrupted|deadline|smoke|hung|hung_killed|nccl_choice|hooks}
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -KILL "$pid" 2> /dev/null; rm -rf "$tmp"' EXIT
bad=0
want() {  # DESCRIPTION COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok      $what"; else echo "WRONG   $what"; bad=1; fi
}

# ---- the stand-in build ----
B=$tmp/build
mkdir -p "$B/bin"
: > "$B/CMakeCache.txt"
cat > "$B/bin/stub" <<'EOF'
#!/bin/sh
# stand-in for a GPU program: takes STUB_SLEEP seconds, then fails as it would without a GPU
echo $$ >> "$STUB_PIDS"
sleep "${STUB_SLEEP:-1}"
echo "error: stand-in for $(basename "$0"): no GPU here" >&2
exit 1
EOF
printf '#!/bin/sh\necho "${STUB_GPUS:-0}"\n' > "$B/bin/gpu_count"
chmod +x "$B/bin/stub" "$B/bin/gpu_count"
for p in 01_single_gpu 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero 08_fsdp probe; do
  ln -s stub "$B/bin/$p"
done
# nvidia-smi and torchrun too, first on PATH (torchrun would take seconds to start the stand-in)
mkdir -p "$tmp/path"
cat > "$tmp/path/nvidia-smi" <<'EOF'
#!/bin/sh
# STUB_SMI_HANG=1: hangs as on a wedged GPU (a stand-in process like the others)
[ -n "${STUB_SMI_HANG:-}" ] && { echo $$ >> "$STUB_PIDS"; exec sleep 300; }
case "$*" in
  *--query-gpu*) echo "NVIDIA H200 (stand-in), 570.00, 143771 MiB" ;;
  -L) i=0; while [ $i -lt "${STUB_GPUS:-0}" ]; do echo "GPU $i: NVIDIA H200 (stand-in)"; i=$((i + 1)); done ;;
  *) echo "stand-in nvidia-smi $*" ;;
esac
EOF
printf '#!/bin/sh\necho "error: stand-in torchrun" >&2\nexit 1\n' > "$tmp/path/torchrun"
chmod +x "$tmp/path/"*
export PATH=$tmp/path:$PATH STUB_PIDS=$tmp/pids DDP_GPU_REUSE_BUILD=1 DDP_GPU_OUT=$tmp/out
: > "$STUB_PIDS"
S=$tmp/out/summary.txt

finished() {  # PID GUARD_SECONDS: waits for it to end; false (and kills it) if it has not by then
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2> /dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$1" 2> /dev/null
  return 1
}
packed() {  # the logs: archived, the folder gone; the archive holds FILE (a pattern) when given
  local list
  [ -f "$tmp/out/logs.tar.gz" ] && [ ! -e "$tmp/out/logs" ] && list=$(tar -tzf "$tmp/out/logs.tar.gz") &&
    grep -qE "^logs/${1:-nvidia-smi.txt}$" <<< "$list"
}
stubs_gone() {  # every stand-in process has ended
  local p
  for p in $(cat "$STUB_PIDS"); do kill -0 "$p" 2> /dev/null && return 1; done
  return 0
}
rows() { grep -cE ' (ok|FAILED|SKIPPED): ' "$S"; }
run_whole() {  # LABEL [VAR=VALUE...]: gpu_check.sh with those variables, to its own end (guard: 60 s); sets rc
  local label=${1:+$1: }
  shift
  env "$@" "$root/scripts/gpu/gpu_check.sh" "$B" > "$tmp/stdout" 2>&1 &
  pid=$!
  want "${label}it ends by itself (guard: 60 s)" finished "$pid" 60
  wait "$pid"
  rc=$?
  pid=""
}

case $scenario in
  killed | interrupted)
    # SIGTERM, or SIGINT (Ctrl-C), to a gpu_check.sh started in the background, where the shell
    # ignores SIGINT in it: it must stop on either
    sig=TERM num=15
    [ "$scenario" = interrupted ] && sig=INT num=2
    STUB_GPUS=2 STUB_SLEEP=40 "$root/scripts/gpu/gpu_check.sh" "$B" > "$tmp/stdout" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do  # until the smoke test's probe is running (its log exists)
      ls "$tmp/out/logs/"*probe_smoke* > /dev/null 2>&1 && [ -s "$STUB_PIDS" ] && break
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.1
    done
    kill -$sig "$pid"
    want "it ends soon after SIG$sig, though its run had 40 s to go" finished "$pid" 30
    wait "$pid"
    rc=$?
    pid=""
    want "exit status 128 + $num (it was $rc)" [ "$rc" -eq $((128 + num)) ]
    want "the summary exists" [ -f "$S" ]
    want "the rows decided before the signal are there: nvidia-smi" \
      grep -qE '^nvidia-smi +ok: 2 GPU.*H200 \(stand-in\)' "$S"
    want "... and the GPU count" grep -qE '^GPU visible to CUDA +ok: 2' "$S"
    want "$(rows) rows, at least 4" [ "$(rows)" -ge 4 ]
    want "the smoke test, stopped, has no row" bash -c "! grep -q '^NCCL smoke test' '$S'"
    want "it says it was stopped, when and where" \
      grep -qE '^# STOPPED by SIG'$sig' after [0-9]+ s, in section 1b .*running probe_smoke \(logs/[0-9]+_probe_smoke\.log\)' "$S"
    want "the counts come before it" grep -qE '^# [0-9]+ ok, [0-9]+ failed, [0-9]+ skipped$' "$S"
    want "the logs are packed, with the stopped run's" packed '[0-9]+_probe_smoke\.log'
    want "the stand-ins it started are gone" stubs_gone
    ;;
  deadline)
    # 1 GPU, an NCCL < 2.30 (none answers): no smoke test, no section 5 runs. Each run takes 2 s, and
    # sections 3 and 4 hold 10 of them plus torchrun: more than 20 s
    run_whole "" STUB_GPUS=1 STUB_SLEEP=2 DDP_GPU_DEADLINE=20
    want "exit status 1: its rows failed (it was $rc)" [ "$rc" -eq 1 ]
    want "it says it completed, and what the deadline did" grep -qE '^# complete after [0-9]+ s \(.*deadline' "$S"
    want "rows SKIPPED \"deadline\"" grep -qE ' SKIPPED: deadline' "$S"
    want "section 5's row is SKIPPED" grep -qE '^several ranks \(steps 04-08\) +SKIPPED: ' "$S"
    for n in 0 1 1b 2 3 4 5 5b; do want "section $n is in the table" grep -q "^## $n\. " "$S"; done
    want "nothing ran once the deadline was reached: no FAILED row after the first 'deadline: reached'" \
      bash -c "! sed -n '/SKIPPED: deadline: reached/,\$p' '$S' | grep -q ' FAILED: '"
    want "the logs are packed" packed
    want "the stand-ins it started are gone" stubs_gone
    ;;
  smoke)
    run_whole "" STUB_GPUS=2 STUB_SLEEP=0
    mr="FAILED: multi-rank NCCL does not work here"
    want "the smoke test FAILED" grep -qE '^NCCL smoke test: probe, 2 ranks +FAILED: exit 1: error: stand-in' "$S"
    want "the bucket-order row: $mr" grep -qE "^bucket all-reduce order.* $mr" "$S"
    want "the collectives row: $mr" grep -qE "^reduce-scatter, all-gather in place.* $mr" "$S"
    want "section 5's rows are those of 2 ranks on 2 GPUs, each $mr" \
      grep -qE "^step 06 = step 05, 2 ranks on 2 GPUs +$mr" "$S"
    want "section 5b's rows too, e.g. the fp16 hook's: $mr" \
      grep -qE "^step 06 --comm_hook fp16, 2 ranks on 2 GPUs: replicas identical +$mr" "$S"
    want "section 5: no other verdict" bash -c "! sed -n '/^## 5\./,\$p' '$S' | grep -E ' (ok|SKIPPED): '"
    want "section 5: no run started (no log)" bash -c "! tar -tzf '$tmp/out/logs.tar.gz' | grep -E 'np[0-9]'"
    want "the world-size-1 rows ran (not multi-rank)" grep -qE '^step 05, 1 rank, 2 epochs +FAILED: error: stand-in' "$S"
    want "it says it completed" grep -qE '^# complete after [0-9]+ s$' "$S"
    ;;
  hung)
    run_whole "" STUB_SMI_HANG=1 STUB_GPUS=1 STUB_SLEEP=2 DDP_GPU_DEADLINE=8
    want "exit status 1: a row failed (it was $rc)" [ "$rc" -eq 1 ]
    want "the nvidia-smi row FAILED: it did not answer"       grep -qE '^nvidia-smi +FAILED: did not answer in [0-9]+ s \(hung' "$S"
    secs=$(sed -nE 's/^# complete after ([0-9]+) s.*/\1/p' "$S")
    want "it says it completed, within the deadline of 8 s (after ${secs:-?} s by its clock)" \
      [ "${secs:-99}" -le 8 ]
    want "rows after it SKIPPED \"deadline\"" grep -qE ' SKIPPED: deadline' "$S"
    want "no other row FAILED" bash -c "[ \$(grep -c ' FAILED: ' '$S') -eq 1 ]"
    want "the logs are packed" packed
    want "the stand-ins it started are gone, the hung nvidia-smi too" stubs_gone
    ;;
  hung_killed)
    STUB_SMI_HANG=1 STUB_GPUS=1 "$root/scripts/gpu/gpu_check.sh" "$B" > "$tmp/stdout" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do  # until the hung nvidia-smi runs
      [ -s "$STUB_PIDS" ] && break
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.1
    done
    kill -TERM "$pid"
    want "it ends soon after SIGTERM (guard: 10 s), though nvidia-smi had 20 s" finished "$pid" 10
    wait "$pid"
    rc=$?
    pid=""
    want "exit status 143 (it was $rc)" [ "$rc" -eq 143 ]
    want "it says it was stopped while nvidia-smi ran" \
      grep -qE '^# STOPPED by SIGTERM after [0-9]+ s, in section 0 .*running nvidia-smi' "$S"
    want "the hung nvidia-smi is gone" stubs_gone
    ;;
  nccl_choice)
    # a carried NCCL (a tarball with include/nccl.h) and a stock one: the toolkit's where it is, else
    # a stand-in of PyTorch's wheel (site-packages/nvidia/nccl under PYTHONUSERBASE)
    mkdir -p "$tmp/nccl/include" "$tmp/deps"
    echo '#define NCCL_MAJOR 2' > "$tmp/nccl/include/nccl.h"
    tar -cJf "$tmp/deps/nccl-2.30.0.tar.xz" -C "$tmp/nccl" include
    export PYTHONUSERBASE=$tmp/userbase DEPS_DIR=$tmp/deps
    wheel=$(python3 -c 'import site; print(site.getusersitepackages())')/nvidia/nccl
    mkdir -p "$wheel/include" && cp "$tmp/nccl/include/nccl.h" "$wheel/include/"
    for g in 2 1; do
      run_whole "$g GPU(s)" STUB_GPUS=$g STUB_SLEEP=0 DDP_GPU_DEADLINE=30
      cp "$S" "$tmp/summary_$g.txt"
    done
    want "2 GPUs: the stock NCCL is chosen, and why" \
      grep -qE '^# NCCL chosen: the stock NCCL \(.*\): 2 GPUs, one rank each; the NCCL carried in .* not used' \
      "$tmp/summary_2.txt"
    want "1 GPU: the carried NCCL is chosen (unpacked)" \
      grep -qE "^# NCCL chosen: the NCCL carried in $tmp/deps/nccl " "$tmp/summary_1.txt"
    want "... and unpacked" [ -f "$tmp/deps/nccl/include/nccl.h" ]
    S=$tmp/summary_2.txt
    ;;
  hooks)
    # a stand-in that succeeds: the probe's ok lines, and the trainers' metrics and traces (what
    # gpu_compare.py reads), from their flags; STUB_BROKEN=1 breaks each condition of section 5b
    cat > "$B/bin/trainer" <<'PY'
#!/usr/bin/env python3
import json, os, sys
prog, a = os.path.basename(sys.argv[0]), sys.argv[1:]
rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
broken = os.environ.get("STUB_BROKEN") == "1"
with open(os.environ["STUB_PIDS"], "a") as f:
    print(os.getpid(), file=f)
def flag(name, default=None):
    return a[a.index(name) + 1] if name in a else default
if prog == "probe":
    print(f"[stand-in rank {rank}/{world} local {rank} device cuda:{rank}] ok")
    if rank == 0:
        print("# backend nccl: stand-in\n# #wrong in all: 0 OK")
    sys.exit(0)
hook, clip = flag("--comm_hook", "allreduce"), flag("--clip_grad_norm")
if "--check_finite" in a and os.environ.get("DDP_TEST_NAN_BACKWARD") == "3" and not broken:
    print(f"error: [rank {rank}] --check_finite: rank {rank}, step 3: 1 non-finite gradient value (NaN or "
          "infinity) in bucket 2 (layers 0 to 0), found before its all-reduce: no replica received it", file=sys.stderr)
    sys.exit(1)
# broken: rank 1 keeps its own bucket (a 16-bit all-reduce that sums nothing) or clips by its own
# norm, and 07 and 08 log a shard's norm (a local norm)
digest = f"00{hook}{clip}" + ("-rank1" if broken and rank == 1 and (hook != "allreduce" or clip) else "")
scale = 2 ** -0.5 if broken and prog != "06_full" else 1.0
if flag("--metrics"):
    with open(flag("--metrics").replace("{rank}", str(rank)), "w") as f:
        for k in range(1, 5):
            r = {"type": "step", "step": k, "epoch": 0, "loss": 2.3 - 0.1 * k}
            if clip:
                r["grad_norm"] = scale / k
            print(json.dumps(r), file=f)
        print(json.dumps({"type": "epoch", "epoch": 0, "test_acc": 0.5}), file=f)
        print(json.dumps({"type": "final", "world_size": world, "param_digest": digest}), file=f)
if flag("--trace"):  # PowerSGD compressing from step 3; broken: spans of events never recorded (V3)
    ev = [{"ph": "M", "name": "thread_name", "pid": rank, "tid": t, "args": {"name": n}}
          for t, n in ((1, "compute: backward"), (2, "communication"))]
    for k in range(1, 5):
        n, ts = (0, -1234.5) if broken else (269322 if k < 3 else 1044, 100.0 * k + 10)
        ev += [{"ph": "X", "name": "backward layer 0", "pid": rank, "tid": 1, "ts": 100.0 * k, "dur": 5.0,
                "args": {"step": k}},
               {"ph": "X", "name": f"powersgd bucket 0: {n} floats ({n * 4 / 2 ** 20:.2f} MiB)", "pid": rank,
                "tid": 2, "ts": ts, "dur": 3.0, "args": {"step": k}}]
    with open(flag("--trace").replace("{rank}", str(rank)), "w") as f:
        json.dump({"displayTimeUnit": "ms", "traceEvents": ev}, f)
PY
    chmod +x "$B/bin/trainer"
    for p in 01_single_gpu 04_ddp_wrap 05_metrics_ckpt 06_full 07_zero 08_fsdp probe; do
      ln -sf trainer "$B/bin/$p"
    done
    # each row of section 5b, and what it must say when its condition is broken
    hooks=(
      "step 06 --comm_hook fp16, 2 ranks on 2 GPUs: replicas identical" "(DIFFERENT)"
      "step 06 --comm_hook bf16, 2 ranks on 2 GPUs: replicas identical" "(DIFFERENT)"
      "step 06 --comm_hook powersgd, 2 ranks on 2 GPUs: replicas identical" "(DIFFERENT)"
      "step 06 --comm_hook powersgd --trace, 2 ranks on 2 GPUs: its spans" "before the trace's start"
      "step 06 --clip_grad_norm, 2 ranks on 2 GPUs: replicas identical" "(DIFFERENT)"
      "step 07 = step 06 with --clip_grad_norm, 2 ranks on 2 GPUs" "grad_norm identical: False"
      "step 08 = step 06 with --clip_grad_norm, 2 ranks on 2 GPUs" "grad_norm identical: False"
      "step 06 --check_finite, a NaN on rank 1, 2 ranks on 2 GPUs: stopped" "exit 0: the run went on"
    )
    for broken in 0 1; do
      run_whole "STUB_BROKEN=$broken" STUB_BROKEN=$broken STUB_GPUS=2 STUB_SLEEP=0
      cp "$S" "$tmp/summary_$broken.txt"
      cp "$tmp/out/logs.tar.gz" "$tmp/logs_$broken.tar.gz"
      sed -n '/^## 5b\./,/^## /p' "$S" | grep -E ' (ok|FAILED|SKIPPED): ' > "$tmp/rows5b"
      want "STUB_BROKEN=$broken: section 5b has $(grep -c . "$tmp/rows5b") rows, expected $((${#hooks[@]} / 2))" \
        [ "$(grep -c . "$tmp/rows5b")" -eq $((${#hooks[@]} / 2)) ]
      for ((i = 0; i < ${#hooks[@]}; i += 2)); do
        row=$(grep -F "${hooks[i]} " "$tmp/rows5b")
        verdict=$(sed -E 's/^ +//' <<< "${row#"${hooks[i]}"}")  # the row's result, its name cut off
        if [ "$broken" -eq 0 ]; then
          want "the row '${hooks[i]}' is ok (${verdict:0:60})" [ "${verdict:0:4}" = "ok: " ]
        else
          want "broken: the row '${hooks[i]}' FAILED, saying '${hooks[i + 1]}'" \
            grep -qF -- "${hooks[i + 1]}" <<< "${verdict#FAILED: }"
          want "... FAILED" [ "${verdict:0:8}" = "FAILED: " ]
        fi
      done
    done
    # DDP_TEST_NAN_BACKWARD on rank 1 alone: only rank 1 found a NaN
    tar -xzOf "$tmp/logs_0.tar.gz" --wildcards '*_step06_finite_np2.log' > "$tmp/finite.log"
    want "the NaN run's log: rank 1 stopped at step 3" grep -qF -- "--check_finite: rank 1, step 3: " "$tmp/finite.log"
    want "... and rank 0 had no NaN of its own" bash -c "! grep -qF -- '--check_finite: rank 0' '$tmp/finite.log'"
    S=$tmp/summary_1.txt
    ;;
  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
if [ $bad -ne 0 ] || [ -n "${SHOW:-}" ]; then
  echo "---- summary.txt"
  cat "$S" 2> /dev/null
  echo "---- stdout"
  cat "$tmp/stdout"
fi
exit $bad
