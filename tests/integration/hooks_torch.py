#!/usr/bin/env python3
"""PyTorch's side of tests/integration/hooks_check.py: runs torch's own functions on numbers the test
wrote, and writes what they return. Run by a Python that has torch (python3-torch).

    hooks_torch.py clip JOBS
        JOBS (JSON): [[IN, SHAPES, MAX, OURS, OUT], ...]; IN: raw float32 gradients of tensors of
        SHAPES ([[64, 784], [64], ...]), OURS: the norm hooks_probe computed. Writes OUT (JSON):
        torch.nn.utils.clip_grad_norm_'s norm, the float64 norm; and (raw, OUT + ".bin")
        clip_grad_norm_'s clipped gradients, then the gradients scaled by clip_grad_norm_'s own
        float32 expression applied to OURS. One process for all cases: importing torch takes seconds.

    hooks_torch.py hook NAMES W IN OUT PORT
        Starts W processes in a Gloo process group (127.0.0.1:PORT); rank r reads IN with {rank}
        replaced (a bucket of raw float32 gradients), calls PyTorch's own hook for each of NAMES
        (comma-separated; fp16: default_hooks.fp16_compress_hook, bf16: bf16_compress_hook) on it as
        DDP would, and writes the bucket it gets back to OUT ({rank} and {name} replaced). Prints, per
        name, "gloo" when Gloo summed the 16-bit type,
        or "emulated" where this torch's Gloo cannot (Debian's torch 1.13: no bfloat16; asked first of
        a one-rank group, so that no collective of the ranks' group is refused): then the hook's
        own lines run, with each rank's compressed bucket all-gathered (as float32: exact) and summed
        in rank order in the 16-bit type by torch's own arithmetic.
"""
import json
import math
import os
import struct
import sys

import torch


def tensors(path, shapes):
    data = open(path, "rb").read()
    flat = torch.tensor(struct.unpack(f"<{len(data) // 4}f", data), dtype=torch.float32)
    out, at = [], 0
    for s in shapes:
        n = math.prod(s)
        out.append(flat[at:at + n].reshape(s).clone())
        at += n
    return out


def clip_all(jobs):
    for src, shapes, max_norm, ours, out in json.load(open(jobs)):
        clip(src, max_norm, shapes, ours, out)


def clip(src, max_norm, shapes, ours, out):
    grads = tensors(src, shapes)
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(params, float(max_norm))
    norm64 = torch.linalg.vector_norm(torch.cat([g.double().flatten() for g in grads])).item()
    # clip_grad_norm_'s own lines, on our norm
    ours_t = torch.tensor(float(ours), dtype=torch.float32)
    coef = torch.clamp(float(max_norm) / (ours_t + 1e-6), max=1.0)
    scaled = [g * coef for g in grads]
    with open(out, "w") as f:
        json.dump({"norm": norm.item(), "norm64": norm64, "coef": coef.item()}, f)
    with open(out + ".bin", "wb") as f:
        for t in [p.grad for p in params] + scaled:
            f.write(struct.pack(f"<{t.numel()}f", *t.flatten().tolist()))


class Bucket:
    """What the default hooks use of DDP's GradBucket: the flat buffer."""
    def __init__(self, t):
        self.t = t

    def buffer(self):
        return self.t


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def gloo_sums(dtype):
    """Whether this torch's Gloo all-reduces `dtype`, asked of a one-rank group in this process (a
    file store), never of the ranks' group: there a refused collective can resurface in a later one
    (torch 1.13's barrier re-raised "Invalid scalar type" now and then, and its teardown aborted)."""
    import tempfile
    import torch.distributed as dist
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{d}/store", rank=0, world_size=1)
        try:
            dist.all_reduce(torch.zeros(4, dtype=dtype))
            return True
        except RuntimeError:
            return False
        finally:
            dist.destroy_process_group()


def hook_rank(rank, names, sums, W, src, out, port):
    import os
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=W)
    data = open(src.replace("{rank}", str(rank)), "rb").read()
    g = torch.tensor(struct.unpack(f"<{len(data) // 4}f", data), dtype=torch.float32)
    for name in names.split(","):
        one_hook(rank, name, sums[name], W, g, out.replace("{name}", name))
    leave(dist)


def one_hook(rank, name, sums, W, g, out):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}[name]
    how = "gloo"
    if sums:
        res = hook(None, Bucket(g.clone())).wait()
    else:  # this Gloo has no sum of the type: the hook's arithmetic, the sum emulated
        how = "emulated"
        dtype = DTYPES[name]
        c = g.to(dtype).div_(W)
        parts = [torch.empty_like(g) for _ in range(W)]
        dist.all_gather(parts, c.to(torch.float32))  # exact: every 16-bit value is a float32
        total = parts[0].to(dtype)
        for p in parts[1:]:
            total += p.to(dtype)
        res = total.to(torch.float32)
    with open(out.replace("{rank}", str(rank)), "wb") as f:
        f.write(struct.pack(f"<{res.numel()}f", *res.tolist()))
    if rank == 0:
        print(name, how, flush=True)


def hook_all(names, W, src, out, port):
    import torch.multiprocessing as mp
    sums = {name: gloo_sums(DTYPES[name]) for name in names.split(",")}
    mp.spawn(hook_rank, args=(names, sums, int(W), src, out, int(port)), nprocs=int(W))


class PsgdBucket:
    """What powerSGD_hook uses of DDP's GradBucket: the flat buffer, its index, the gradients (views of
    the buffer, in its order) and whether it is the iteration's last."""
    SHAPES = [(64, 784), (64,), (10, 64), (10,)]

    def __init__(self, t):
        self.t, self.views, at = t, [], 0
        for s in self.SHAPES:
            n = math.prod(s)
            self.views.append(t[at:at + n].view(s))
            at += n

    def buffer(self):
        return self.t

    def index(self):
        return 0

    def gradients(self):
        return self.views

    def is_last(self):
        return True


def psgd_rank(rank, W, qpath, in1, in2, out, port):
    import os
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ph
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=W)
    state = ph.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    state.iter = 2  # compress from the first call, as the C side does
    data = open(qpath, "rb").read()
    q = torch.tensor(struct.unpack(f"<{len(data) // 4}f", data), dtype=torch.float32)
    state.q_memory_dict[0] = q.clone()  # warm start from the same Q: it is orthogonalised first
    state.p_memory_dict[0] = torch.empty(64 + 10)
    for it, src in ((1, in1), (2, in2)):
        data = open(src.replace("{rank}", str(rank)), "rb").read()
        g = torch.tensor(struct.unpack(f"<{len(data) // 4}f", data), dtype=torch.float32)
        res = ph.powerSGD_hook(state, PsgdBucket(g)).wait()
        with open(out.replace("{rank}", str(rank)).replace("{iter}", str(it)), "wb") as f:
            f.write(struct.pack(f"<{res.numel()}f", *res.tolist()))
    leave(dist)


def leave(dist):
    """Ends a rank once every rank's results are written: a barrier, then the process exits at once.
    The Gloo of Debian's torch 1.13 can abort in its teardown ("terminate called without an active
    exception", a worker thread still joinable while the group or the interpreter is torn down), which
    a busy machine made happen once in a test run; nothing is left to tear down that the exit does
    not end."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "clip":
        clip_all(sys.argv[2])
    elif sys.argv[1] == "hook":
        hook_all(*sys.argv[2:7])
    elif sys.argv[1] == "powersgd":  # powersgd W Q IN1 IN2 OUT PORT: as hooks_probe powersgd
        import torch.multiprocessing as mp
        W = int(sys.argv[2])
        mp.spawn(psgd_rank, args=(W, *sys.argv[3:7], int(sys.argv[7])), nprocs=W)
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
