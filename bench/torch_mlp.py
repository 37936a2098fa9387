#!/usr/bin/python3
"""PyTorch reference trainer for the ddp-in-c benchmarks (bench/).

The same model, data, batch and optimizer as the C steps: nn.Sequential of Linear/ReLU (PyTorch's
default init), Fashion-MNIST from $DDP_FASHION_MNIST_DIR/*.gz (default /usr/share/datasets/fashion-mnist,
as the C programs') read with gzip + numpy and
normalised (x/255 - 0.2860)/0.3530 (or synthetic random data of the same shape), SGD(lr, momentum 0.9),
CrossEntropyLoss, a reshuffle every epoch, gradients set to None before each step.

Prints one JSON line: median step time (after --warmup steps), samples/s, peak RSS, and the time from
process start (the kernel's start time of this process) to the end of the first step. With --ddp the
model is wrapped in DistributedDataParallel (gloo, one thread per process); each process takes a
disjoint 1/W of every epoch's permutation, and rank 0 prints the line (samples/s counts all ranks).
Launch it either with --ddp --world_size W (spawns W processes) or under a launcher that sets
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (e.g. torchrun, or mpirun with those exported).

--device cuda trains on the GPU (rank r on cuda:r; DDP then uses NCCL), data resident on the GPU, fp32
with TF32 disabled (torch.backends.cuda.matmul.allow_tf32 = False), as the C steps' plain fp32 cuBLAS,
or with it enabled under --tf32 (as the C steps' --tf32).
--sync step (the default) ends every step with loss.item(), which waits for the GPU, and reports the
median step time. --sync end keeps the losses on the device and reads them after the loop, so the host
queues steps ahead of the GPU (as step 06 does); per-step times are then meaningless, and the reported
step time is the mean over the steps after --warmup, between two torch.cuda.synchronize() calls.

Run with /usr/bin/python3 (Debian's python3-torch). Example:
  /usr/bin/python3 bench/torch_mlp.py --steps 60 --warmup 10 --threads 1
"""
import argparse
import gzip
import json
import os
import resource
import sys
import time

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

# As the C programs' default (common/data/data.h), overridden like the tests' by DDP_FASHION_MNIST_DIR.
DATA_DIR = os.environ.get("DDP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
MEAN, STD = 0.2860, 0.3530


def process_age_s():
    """Seconds since this process was started by the kernel (exec of the interpreter)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])  # field 22: starttime, clock ticks after boot
    start = start_ticks / os.sysconf("SC_CLK_TCK")
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data(kind, data_dir, n_synth, seed):
    if kind == "fashion_mnist":
        x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
        y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
        x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
        return x.contiguous(), torch.from_numpy(y.astype(np.int64))
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_synth, 784, generator=g), torch.randint(0, 10, (n_synth,), generator=g)


def build_model(hidden, seed):
    torch.manual_seed(seed)
    sizes = [784] + hidden + [10]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def train(rank, world, args):
    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = args.tf32  # plain fp32 unless --tf32, as the C steps
        torch.backends.cudnn.allow_tf32 = args.tf32
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    ddp = world > 1 or args.ddp
    if ddp:
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    x_all, y_all = load_data(args.data, args.data_dir, args.dataset_size, args.seed)
    x_all, y_all = x_all.to(dev), y_all.to(dev)
    n = x_all.shape[0]
    model = build_model([int(h) for h in args.hidden.split(",") if h], args.seed).to(dev)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    B = args.batch_size
    per_rank = n // world
    steps_per_epoch = per_rank // B  # full batches only
    times, losses = [], []
    first_step_s = None
    epoch = 0
    step = 0
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    window_t0 = None  # --sync end: the start of the timed window
    while step < args.steps:
        g = torch.Generator().manual_seed(args.seed + epoch)
        perm = torch.randperm(n, generator=g)[rank * per_rank:(rank + 1) * per_rank].to(dev)
        for i in range(steps_per_epoch):
            if step >= args.steps:
                break
            if step == args.warmup and args.sync == "end":
                sync()
                window_t0 = time.perf_counter()
            t0 = time.perf_counter()
            idx = perm[i * B:(i + 1) * B]
            xb, yb = x_all.index_select(0, idx), y_all.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            if args.sync == "step" or step == 0:
                lv = loss.item()  # waits for the GPU, as step 01's read of the loss
            else:
                lv = loss.detach()  # stays on the device, read after the loop (as step 06)
            dt = time.perf_counter() - t0
            if first_step_s is None:
                first_step_s = process_age_s()
            times.append(dt)
            losses.append(lv)
            step += 1
        epoch += 1
    sync()
    end_t = time.perf_counter()  # before the losses are read back: not part of the steps
    losses = [float(v) for v in losses]
    if args.sync == "end":
        if window_t0 is None:
            raise SystemExit("--sync end needs --steps > --warmup")
        med = (end_t - window_t0) / (len(times) - args.warmup)
    else:
        steady = sorted(times[args.warmup:] or times)
        med = steady[len(steady) // 2] if len(steady) % 2 else 0.5 * (
            steady[len(steady) // 2 - 1] + steady[len(steady) // 2])
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {
        "impl": "torch", "torch": torch.__version__, "device": args.device, "rank": rank,
        "world_size": world,
        "threads": torch.get_num_threads(), "batch_size": B, "hidden": args.hidden,
        "data": args.data, "steps": len(times), "warmup": args.warmup,
        "tf32": bool(cuda and args.tf32), "sync": args.sync,
        "timing": "median step" if args.sync == "step" else "mean step, no per-step sync",
        "median_step_s": med, "samples_per_s": B * world / med,
        "peak_rss_mb": rss_kb / 1024.0, "first_step_s": first_step_s,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
    }
    if rank == 0:
        print(json.dumps(out), flush=True)
    if ddp:
        import torch.distributed as dist
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10, help="steps left out of the median")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--hidden", default="1024,1024")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", choices=["fashion_mnist", "synthetic"], default="fashion_mnist")
    p.add_argument("--data_dir", default=DATA_DIR)
    p.add_argument("--dataset_size", type=int, default=60000, help="synthetic samples")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--ddp", action="store_true",
                   help="DistributedDataParallel (gloo on cpu, nccl on cuda)")
    p.add_argument("--world_size", type=int, default=0,
                   help="with --ddp: spawn this many processes (default: $WORLD_SIZE or 1)")
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--tf32", action="store_true", help="cuda: let matmuls use TF32 tensor cores")
    p.add_argument("--sync", choices=["step", "end"], default="step",
                   help="read the loss every step (loss.item()) or only after the loop")
    args = p.parse_args()
    if args.ddp and "RANK" in os.environ and "WORLD_SIZE" in os.environ and not args.world_size:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    elif args.ddp and args.world_size > 1:
        import torch.multiprocessing as mp
        mp.spawn(train, args=(args.world_size, args), nprocs=args.world_size, join=True)
    else:
        train(0, args.world_size if args.ddp and args.world_size else 1, args)


if __name__ == "__main__":
    sys.exit(main())
