"""Step 02 (the process group): every rank trains on all the data.
"""
import os

from tests.harness.env import SMALL, Failure
from tests.harness.families import own_binary
from tests.harness.launch import run
from tests.harness.results import digests, metrics
from tests.harness.scenario import register, scenario


@scenario(processors=2, launchers=("launch",))
def step02_redundant(tmp):
    """Step 02 at 2 ranks: every rank trains on all the data, bit-identical to step 01."""
    run("01_single_gpu", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/a0.jsonl"])
    run("02_init", SMALL + ["--epochs", "1", "--metrics", f"{tmp}/b{{rank}}.jsonl"], np=2)
    for r in range(2):  # (before reading rank 0's file, which two ranks that both think they are 0 garble)
        if not os.path.exists(f"{tmp}/b{r}.jsonl"):
            raise Failure(f"rank {r}'s metrics file is missing: each rank writes --metrics with its own rank "
                          "in the name, so under mpirun every process must know its rank (t->rank = t->pg.rank)")
    want = digests(f"{tmp}/a", 1)[0]
    got = digests(f"{tmp}/b", 2)
    if got != [want, want]:
        raise Failure(f"step 02 ranks {got} differ from step 01 {want}")
    sizes = [metrics(f"{tmp}/b{r}.jsonl")[2]["world_size"] for r in range(2)]
    if sizes != [2, 2]:
        raise Failure(f"under mpirun -n 2 the ranks report world sizes {sizes}\nlikely cause: the world "
                      f"size is not taken from the process group (t->world_size = t->pg.world_size)")


register(own_binary("02_init"), ctest=False)  # the exercise checker's first claim
