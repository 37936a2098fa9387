#!/usr/bin/env python3
"""CTest `golden_catches_wrong`: dev/golden.py tells a wrong run from a right one.

1. A golden file turned back into metrics files compares as MATCHES (exit 0); the same files with one
   loss moved by 1e-4 (relative) at step 5 of rank 1 compare as DIFFERS, naming step 5 and rank 1
   (exit 1). A dropped step is named too; so is, compared as structure only (--structure: another
   kernel), a rank whose digest no longer equals the others'.
2. A real wrong run: step 03's program (no gradient averaging) run against step 04's golden file at
   2 ranks differs, first at step 2: step 1's losses are those of the same start. On the files'
   kernel against the file, on any other against step 04's program run here (bit for bit both).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "dev" / "golden.py"
bad = 0


def golden(*args):
    p = subprocess.run([sys.executable, str(GOLDEN), *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def expect(cond, what, out):
    global bad
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        print("     golden.py said: " + out.strip().replace("\n", "\n     "))
        bad += 1


def write_run(gfile, tmp, change=None):
    """The golden records of gfile as one metrics file per rank; change(e) may edit or drop (None) one."""
    lines = [json.loads(l) for l in open(gfile)]
    head, recs = lines[0], lines[1:]
    files = {r: open(os.path.join(tmp, f"m_{r}.jsonl"), "w") for r in range(head["world_size"])}
    for e in recs:
        e = dict(e)
        if change:
            e = change(e)
            if e is None:
                continue
        r = e.pop("rank")
        files[r].write(json.dumps(e) + "\n")
    for f in files.values():
        f.close()
    return os.path.join(tmp, "m_{rank}.jsonl")


g = ROOT / "tests" / "golden" / "06_full_np3.jsonl"
with tempfile.TemporaryDirectory() as tmp:
    rc, out = golden("compare", str(g), write_run(g, tmp))
    expect(rc == 0 and "MATCHES" in out, "the golden records themselves match", out)

    def nudge(e):
        if e["type"] == "step" and e["step"] == 5 and e["rank"] == 1:
            e["loss"] *= 1 + 1e-4
        return e
    rc, out = golden("compare", str(g), write_run(g, tmp, nudge))
    expect(rc == 1 and "first at step 5 " in out and "rank 1" in out,
           "one loss moved by 1e-4 at step 5 of rank 1 is named", out)

    def drop(e):
        return None if e["type"] == "step" and e["step"] == 7 and e["rank"] == 2 else e
    rc, out = golden("compare", str(g), write_run(g, tmp, drop))
    expect(rc == 1 and "first at step 7 " in out and "rank 2" in out and "no such step" in out,
           "a missing step 7 of rank 2 is named", out)

    rc, out = golden("compare", "--structure", str(g), write_run(g, tmp, nudge))
    expect(rc == 0 and "MATCHES in structure" in out, "structure only: a moved loss is not compared", out)

    def split(e):
        if e["type"] == "final" and e["rank"] == 2:
            e["param_digest"] = "0123456789abcdef"
        return e
    rc, out = golden("compare", "--structure", str(g), write_run(g, tmp, split))
    expect(rc == 1 and "equal param_digests are [[0, 1], [2]]" in out,
           "structure only: rank 2's digest apart from the others' is named", out)

rc, out = golden("run", "04_ddp_wrap", "2", "--program", os.path.join(os.environ.get("DDP_BIN_DIR", ROOT / "build" / "bin"), "03_sampler"))
expect(rc == 1 and "DIFFERS first at step 2 " in out,
       "step 03's program (gradients not averaged) run as step 04 differs first at step 2", out)
sys.exit(1 if bad else 0)
