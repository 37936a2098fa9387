"""Claims of the chapters checked by running them (docs_quotes.py and golden_catches.py are the other
docs checks).
"""
import os
import re

from tests.harness.env import ROOT, Failure
from tests.harness.launch import run
from tests.harness.scenario import scenario


# ---- review: the digest docs/06_full.md pastes for its launchers --------------------------------------

@scenario(processors=2, needs=("gloo", "mpi"))
def docs06_launcher_digest(tmp):
    """docs/06_full.md's torchrun run, and its claim that mpirun -np 2 and scripts/launch.sh -n 2 end at
    the same param_digest: the commands end at one digest, and, where this machine's OpenBLAS runs the
    chapters' kernel (docs/README.md, "its kernel: K"; the programs' start-up line names it), at the
    digest pasted there. OPENBLAS_CORETYPE is never set here: on another kernel only the agreement of
    the launchers is checked (their digests differ from the paste by rounding, not by mistake)."""
    with open(os.path.join(ROOT, "docs", "06_full.md")) as f:
        text = f.read()
    with open(os.path.join(ROOT, "docs", "README.md")) as f:
        docs_kernel = re.search(r"its BLAS:\s+`?(\S+ \S+, kernel \w+)", f.read()).group(1)
    block = text[text.index("$ torchrun --standalone --nproc_per_node 2"):]
    pasted = re.search(r"\[default0\]:done: 8 steps, param_digest ([0-9a-f]{16})", block).group(1)
    claim = re.search(r"`scripts/launch.sh -n 2` with the same flags end at `param_digest ([0-9a-f]{16})` too",
                      block).group(1)
    args = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "2048", "--hidden", "64", "--epochs", "1",
            "--save_interval", "0"]
    got, kernel = {}, None
    for launcher in ("mpirun", "launch"):
        out, _ = run("06_full", args, np=2, tmp=tmp, launcher=launcher)
        got[launcher] = re.search(r"done: 8 steps, param_digest ([0-9a-f]{16})", out).group(1)
        line = re.search(r"^blas: (\S+ \S+, kernel \S+),", out, re.M)  # none without OpenBLAS (DDP_BLAS=none)
        kernel = line.group(1) if line else re.search(r"^blas: (.*)$", out, re.M).group(1)
    if len(set(got.values())) != 1 or claim != pasted:
        raise Failure(f"docs/06_full.md pastes param_digest {pasted} (torchrun) and {claim} (mpirun, launch.sh); "
                      f"the commands end at {got}")
    if kernel != docs_kernel:
        print(f"mpirun and launch.sh agree ({got['mpirun']}); BLAS {kernel}, not the docs' "
              f"{docs_kernel}: the pasted {pasted} is not compared")
        return
    if got["mpirun"] != pasted:
        raise Failure(f"docs/06_full.md pastes param_digest {pasted}; with the docs' BLAS {kernel} the "
                      f"commands end at {got}")
    print(f"docs/06_full.md's digest {pasted}: mpirun and launch.sh end there (kernel {kernel})")
