#!/usr/bin/env python3
"""Does an NCCL library carry every collective this project calls?

An NCCL built with a subset of its device functions (NCCL's ONLY_FUNCS) runs a missing one as an
empty kernel: no error, no data moved. NCCL names its device functions
ncclDevFunc_<Collective>_<Op>_<type>_<algorithm>_<protocol> (Broadcast and AllGather move bytes and
have no op or type; int32 is u32, as NCCL sums signed and unsigned alike), so the library's symbol
and string table says what it can do.

Usage: scripts/gpu/nccl_caps.py LIBRARY_OR_LIST    (a libnccl.so, or a text file of names)
       scripts/gpu/nccl_caps.py --calls common/dist/dist_nccl.c   (the collectives that file calls must be
                                                          the ones checked here)
Prints one line, "ok: ..." or "MISSING: ...", and exits 0 when every function is there, 1 when one is
missing, 2 when the file cannot be read.
"""
import mmap
import re
import sys

# What common/dist/dist_nccl.c calls, with the types of dist.h (DIST_FLOAT f32, DIST_DOUBLE f64, DIST_INT
# u32) and its ops: DIST_SUM is Sum; DIST_AVG is ncclAvg, which NCCL runs as PreMulSum (a multiply by
# 1/W, then a sum) for floats; dist.h allows DIST_AVG for floats only. Without ncclAvg (NCCL < 2.10,
# or DDP_NCCL_NO_AVG) only Sum is called.
TYPES = ("f32", "f64", "u32")
REDUCING = {  # collective -> the ops it is called with
    "AllReduce": ("Sum", "PreMulSum"),         # dist_all_reduce, the barrier (int sum)
    "ReduceScatter": ("Sum", "PreMulSum"),     # dist_reduce_scatter_async, equal counts
    "Reduce": ("Sum", "PreMulSum"),            # the same with unequal counts: one reduce per root
}
BYTES = ("Broadcast", "AllGather")             # dist_broadcast, dist_all_gather
# --comm_hook fp16 and bf16 all-reduce in 16 bits (DIST_HALF f16, DIST_BF16 bf16; Sum only). A library
# built without them ran the hooks' all-reduces as empty kernels and the replicas drifted apart; the
# hook's canary (dist_verify_sum) now ends such a job at start-up, and this says so beforehand.
HALF = ("f16", "bf16")


def required():
    names = []
    for coll, ops in REDUCING.items():
        for op in ops:
            for t in TYPES if op == "Sum" else ("f32", "f64"):
                names.append(f"{coll}_{op}_{t}")
    return names + [f"AllReduce_Sum_{t}" for t in HALF] + list(BYTES)


def names_in(path):
    """The ncclDevFunc_ names in a shared library (any ELF) or in a text file of names."""
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            f.seek(0)
            return set(re.findall(rb"ncclDevFunc_\w+", f.read()))
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return set(re.findall(rb"ncclDevFunc_\w+", m))


def check(path):
    try:
        have = names_in(path)
    except OSError as e:
        print(f"MISSING: cannot read {path}: {e.strerror}")
        return 2
    # "Reduce_Sum_f32_" cannot match "ReduceScatter_...": the op follows the collective's name.
    prefixes = sorted({n.decode()[len("ncclDevFunc_"):] for n in have})
    missing = [r for r in required() if not any(p.startswith(r + "_") for p in prefixes)]
    if missing:
        print(f"MISSING: {path} lacks {len(missing)} of the {len(required())} NCCL device functions "
              f"the code calls (NCCL would run them as empty kernels): "
              + ", ".join("ncclDevFunc_" + m for m in missing))
        return 1
    print(f"ok: {path} carries all {len(required())} NCCL device functions the code calls "
          f"({', '.join(REDUCING)}: Sum f32 f64 u32, PreMulSum f32 f64; AllReduce: Sum {' '.join(HALF)}; "
          f"{', '.join(BYTES)})")
    return 0


# NCCL's data types as dist_nccl.c names them, and their names in the device functions
NCCL_TYPES = {"ncclFloat32": "f32", "ncclFloat64": "f64", "ncclInt32": "u32", "ncclFloat16": "f16",
              "ncclBfloat16": "bf16"}


def calls(source):
    """The collectives a source file calls, and the types it uses, must be the ones this script checks."""
    with open(source) as f:
        text = f.read()
    called = set(re.findall(r"\bnccl(AllReduce|ReduceScatter|Reduce|Broadcast|AllGather|Send|Recv"
                            r"|AllToAll|Gather|Scatter)\s*\(", text))
    checked = set(REDUCING) | set(BYTES)
    if called != checked:
        print(f"FAILED: {source} calls {sorted(called)}, nccl_caps.py checks {sorted(checked)}")
        return 1
    types = {t for name, t in NCCL_TYPES.items() if re.search(rf"\b{name}\b", text)}
    if types != set(TYPES) | set(HALF):
        print(f"FAILED: {source} uses the types {sorted(types)}, nccl_caps.py checks "
              f"{sorted(set(TYPES) | set(HALF))}")
        return 1
    print(f"ok: {source} calls exactly the collectives checked: {', '.join(sorted(called))}; "
          f"types {', '.join(sorted(types))}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--calls":
        sys.exit(calls(sys.argv[2]))
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(check(sys.argv[1]))
