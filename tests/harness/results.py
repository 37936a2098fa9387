"""Readers of what the programs write: metrics files (JSON lines), checkpoints (common/ckpt/ckpt.h), the
lines they log.
"""
import json
import re
import struct

from tests.harness.env import Failure


def metrics(path):
    """Reads a metrics file into (steps, epochs, final)."""
    steps, epochs, final = [], [], None
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o["type"] == "step":
                steps.append(o)
            elif o["type"] == "epoch":
                epochs.append(o)
            elif o["type"] == "final":
                final = o
    if final is None:
        raise Failure(f"{path} has no final object")
    return steps, epochs, final


# ---- steps 02-05: the process group, the sampler, DDP, metrics and checkpoints ----------------------

def read_checkpoint(path):
    """Parses the checkpoint format of common/ckpt/ckpt.h; returns (header dict, params as floats)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"DDPCKPT\0":
        raise Failure(f"{path}: bad magic")
    hsize, epoch, _, step = struct.unpack_from("<IIIQ", data, 12)
    n_layers = struct.unpack_from("<I", data, 52)[0]
    sizes = struct.unpack_from(f"<{n_layers + 1}I", data, 56)
    n = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(n_layers))
    params = struct.unpack_from(f"<{n}f", data, hsize)
    epoch_step = struct.unpack_from("<I", data, 20)[0]
    return {"epoch": epoch, "epoch_step": epoch_step, "step": step, "sizes": sizes}, params


def digests(prefix, np):
    return [metrics(f"{prefix}{r}.jsonl")[2]["param_digest"] for r in range(np)]


def global_losses(prefix, np, step):
    """Per-step loss of the global batch: from step 05 every rank logs it; before, the mean of the
    ranks' local means (equal local batch sizes)."""
    per_rank = [[s["loss"] for s in metrics(f"{prefix}{r}.jsonl")[0]] for r in range(np)]
    if step >= 5:
        if any(p != per_rank[0] for p in per_rank):
            raise Failure("ranks logged different global losses: each rank logs its own loss; "
                          "all-reduce the step's loss (DIST_AVG) before it is logged")
        return per_rank[0]
    return [sum(v) / np for v in zip(*per_rank)]


def tensor_slices(sizes):
    """(name, start, end) of each parameter tensor in the flat buffer: weight then bias, per layer."""
    out, at = [], 0
    for l in range(len(sizes) - 1):
        for kind, n in (("weight", sizes[l] * sizes[l + 1]), ("bias", sizes[l + 1])):
            out.append((f"layer {l}'s {kind}", at, at + n))
            at += n
    return out


def ckpt_params_momentum(path):
    """(params, momentum) of a checkpoint, as float lists (the momentum follows the parameters)."""
    hdr, params = read_checkpoint(path)
    with open(path, "rb") as f:
        data = f.read()
    hsize = struct.unpack_from("<I", data, 12)[0]
    n = len(params)
    return params, struct.unpack_from(f"<{n}f", data, hsize + 4 * n)


def rel_diff(pa, pb):
    """max |a - b| over max |a|: how far two parameter vectors are apart."""
    return max(abs(x - y) for x, y in zip(pa, pb)) / max(abs(x) for x in pa)


def ckpt_optim_steps(path):
    """The optimizer steps a checkpoint says were taken (header offset 48; docs/formats.md)."""
    with open(path, "rb") as f:
        return struct.unpack_from("<I", f.read(52), 48)[0]


def listed(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def logged_int(out, pattern):
    m = re.search(pattern, out)
    if not m:
        raise Failure(f"no line matching {pattern!r} in:\n{out}")
    return int(m.group(1))
