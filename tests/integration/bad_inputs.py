#!/usr/bin/env python3
"""The catalogue of bad inputs: every case must end every rank with a non-zero exit and a one-line
message that names the problem, within a time limit, and leave the files it was given unchanged.

    bad_inputs.py                 run every case (also CTest's `bad_input_catalogue`)
    bad_inputs.py --markdown      run every case and print docs/errors.md
Needs the programs in $DDP_BIN_DIR (default build/bin) and, for multi-rank cases, mpiexec.
"""
import concurrent.futures
import gzip
import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import zlib

from tests.harness.ports import lock_port_pair

BIN = os.path.abspath(os.environ.get("DDP_BIN_DIR", "build/bin"))
MPIEXEC = os.environ.get("DDP_MPIEXEC", "mpiexec")
# The cases of the Gloo backend need a build with it (CTest passes the build's DDP_HAVE_GLOO).
HAVE_GLOO = os.environ.get("DDP_HAVE_GLOO", "ON").upper() in ("ON", "1", "TRUE", "YES")
GLOO_CASES = {"L9", "L10", "L11"}
# The cases whose rank listens on or connects to the port after their MASTER_PORT (the others stop
# before any connection): run_case reserves those ports as every test's are (tests/harness/ports.py, free_master_port)
NETWORK_CASES = {"L10", "L11"}
SMALL = ["--device", "cpu", "--data", "synthetic", "--dataset_size", "256", "--hidden", "16",
         "--epochs", "1", "--save_interval", "0"]
IDX = ["--device", "cpu", "--hidden", "16", "--epochs", "1", "--save_interval", "0"]

# (id, what is wrong, program, arguments, environment, ranks, exit status, words the message names)
# In arguments, {d} is the case's temporary folder, prepared by prepare() below.
CASES = [
    ("F1", "batch size zero", "05_metrics_ckpt", SMALL + ["--batch_size", "0"], {}, 1, 2, ["batch_size"]),
    ("F2", "batch size not a number", "05_metrics_ckpt", SMALL + ["--batch_size", "abc"], {}, 1, 2, ["abc"]),
    ("F3", "negative epochs", "05_metrics_ckpt", SMALL + ["--epochs", "-1"], {}, 1, 2, ["epochs"]),
    ("F4", "learning rate zero", "05_metrics_ckpt", SMALL + ["--lr", "0"], {}, 1, 2, ["lr"]),
    ("F5", "learning rate not finite", "05_metrics_ckpt", SMALL + ["--lr", "nan"], {}, 1, 2, ["lr"]),
    ("F6", "momentum out of range", "05_metrics_ckpt", SMALL + ["--momentum", "1.5"], {}, 1, 2, ["momentum"]),
    ("F7", "unknown device", "05_metrics_ckpt", SMALL + ["--device", "tpu"], {}, 1, 2, ["tpu"]),
    ("F8", "unknown dataset", "05_metrics_ckpt", SMALL + ["--data", "cifar"], {}, 1, 2, ["cifar"]),
    ("F9", "malformed hidden sizes", "05_metrics_ckpt", SMALL + ["--hidden", "64,,3"], {}, 1, 2, ["hidden"]),
    ("F10", "hidden size zero", "05_metrics_ckpt", SMALL + ["--hidden", "0"], {}, 1, 2, ["hidden"]),
    ("F11", "unknown flag", "05_metrics_ckpt", SMALL + ["--no_such_flag"], {}, 1, 2, ["no_such_flag"]),
    ("F12", "flag without its value", "05_metrics_ckpt", SMALL + ["--epochs"], {}, 1, 2, ["epochs"]),
    ("F13", "stray positional argument", "05_metrics_ckpt", SMALL + ["extra"], {}, 1, 2, ["extra"]),
    ("F14", "a later stage's flag (step 01 has no process group)", "01_single_gpu",
     SMALL + ["--backend", "mpi"], {}, 1, 2, ["backend", "02"]),
    ("F15", "unknown backend", "05_metrics_ckpt", SMALL + ["--backend", "tcp"], {}, 1, 2, ["tcp"]),
    ("F16", "bucket cap zero", "06_full", SMALL + ["--bucket_cap_mb", "0"], {}, 1, 2, ["bucket_cap_mb"]),
    ("F17", "gradient accumulation zero", "06_full", SMALL + ["--grad_accum", "0"], {}, 1, 2, ["grad_accum"]),
    ("D1", "dataset folder missing", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/nowhere"], {}, 1, 1,
     ["{d}/nowhere", "dataset-fashion-mnist", "synthetic"]),
    ("D2", "image file with a label file's magic", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/magic"], {},
     1, 1, ["{d}/magic/train-images-idx3-ubyte.gz", "magic"]),
    ("D3", "truncated image file", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/trunc"], {}, 1, 1,
     ["{d}/trunc/train-images-idx3-ubyte.gz", "truncated"]),
    ("D4", "image and label counts disagree", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/count"], {}, 1, 1,
     ["3 images", "2 labels"]),
    ("D5", "a folder where the image file should be", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/dir"],
     {}, 1, 1, ["{d}/dir/train-images-idx3-ubyte.gz", "directory"]),
    ("D6", "label out of range", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/label"], {}, 1, 1,
     ["label", "out of range"]),
    ("D7", "fewer samples than ranks", "05_metrics_ckpt", SMALL + ["--dataset_size", "3"], {}, 4, 1,
     ["3 training samples for 4 ranks"]),
    ("C1", "checkpoint missing", "05_metrics_ckpt", SMALL + ["--resume", "{d}/none.bin"], {}, 1, 1,
     ["{d}/none.bin"]),
    ("C2", "checkpoint truncated", "05_metrics_ckpt", SMALL + ["--resume", "{d}/trunc.bin"], {}, 2, 1,
     ["{d}/trunc.bin", "truncated"]),
    ("C3", "checkpoint with a flipped bit", "05_metrics_ckpt", SMALL + ["--resume", "{d}/flip.bin"], {}, 2, 1,
     ["{d}/flip.bin", "CRC"]),
    ("C4", "checkpoint of a newer format version", "05_metrics_ckpt", SMALL + ["--resume", "{d}/version.bin"],
     {}, 1, 1, ["{d}/version.bin", "version"]),
    ("C5", "checkpoint of another model shape", "05_metrics_ckpt",
     SMALL[:-6] + ["--hidden", "32", "--epochs", "1", "--save_interval", "0", "--resume", "{d}/good.bin"],
     {}, 2, 1, ["784-16-10", "784-32-10"]),
    ("C6", "checkpoint trained with another seed", "05_metrics_ckpt",
     SMALL + ["--seed", "7", "--resume", "{d}/good.bin"], {}, 1, 1, ["--seed"]),
    ("C7", "a folder given as the checkpoint", "05_metrics_ckpt", SMALL + ["--resume", "{d}"], {}, 1, 1, ["{d}"]),
    ("C8", "a file where the checkpoint folder should be", "05_metrics_ckpt",
     SMALL + ["--save_interval", "1", "--ckpt_dir", "{d}/good.bin"], {}, 1, 1, ["{d}/good.bin"]),
    ("C9", "not a checkpoint at all", "05_metrics_ckpt", SMALL + ["--resume", "{d}/text.bin"], {}, 1, 1,
     ["{d}/text.bin", "not a ddp-in-c checkpoint"]),
    ("L1", "RANK not below WORLD_SIZE", "05_metrics_ckpt", SMALL, {"RANK": "2", "WORLD_SIZE": "2",
     "LOCAL_RANK": "0"}, 1, 1, ["RANK=2", "WORLD_SIZE=2"]),
    ("L2", "RANK without WORLD_SIZE", "05_metrics_ckpt", SMALL, {"RANK": "1"}, 1, 1, ["WORLD_SIZE"]),
    ("L3", "RANK not a number", "05_metrics_ckpt", SMALL, {"RANK": "x", "WORLD_SIZE": "2"}, 1, 1, ["RANK='x'"]),
    ("L4", "two ranks launched by environment with the MPI backend", "05_metrics_ckpt",
     SMALL + ["--backend", "mpi"], {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, 1, 1, ["mpirun"]),
    ("L5", "the NCCL backend with CPU buffers", "05_metrics_ckpt", SMALL + ["--backend", "nccl"], {}, 1, 1,
     ["nccl"]),
    ("L6", "a GPU asked for where there is none (or a build without CUDA)", "05_metrics_ckpt",
     SMALL + ["--device", "cuda", "--backend", "mpi"], {}, 1, 1, ["cuda"]),
    ("L7", "two CPU ranks started by srun without an MPI plugin and without MASTER_ADDR (it asked for NCCL's)",
     "06_full", SMALL, {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"}, 1, 1,
     ["mpirun -np 2", "srun --mpi=pmix -n 2"]),
    ("L8", "two CPU ranks started by torchrun-style variables without MASTER_ADDR", "06_full", SMALL,
     {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 1, 1, ["mpirun -np 2", "srun --mpi=pmix -n 2"]),
    ("L9", "the Gloo backend under mpirun (it meets its peers through MASTER_ADDR and MASTER_PORT)",
     "05_metrics_ckpt", SMALL + ["--backend", "gloo"], {}, 2, 1, ["MASTER_ADDR", "--backend mpi"]),
    ("L10", "a rank of an environment launch that never starts (rank 1 of 2 missing)", "05_metrics_ckpt",
     SMALL + ["--timeout", "2"], {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
     "MASTER_PORT": "29570"}, 1, 1, ["2 s (--timeout)"]),
    ("L11", "rank 0 of an environment launch never starts (its store does not answer)", "05_metrics_ckpt",
     SMALL + ["--timeout", "2"], {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
     "MASTER_PORT": "29572"}, 1, 1, ["127.0.0.1:29573", "rank 0"]),
    ("M1", "metrics file in a missing folder", "05_metrics_ckpt",
     SMALL + ["--metrics", "{d}/no/such/m.jsonl"], {}, 1, 1, ["{d}/no/such/m.jsonl"]),
    # Integer limits: every number has an upper bound, stated in --help.
    ("F18", "batch size above 2^20", "05_metrics_ckpt", SMALL + ["--batch_size", "1048577"], {}, 1, 2,
     ["--batch_size", "1048576"]),
    ("F19", "gradient accumulation above 2^16", "06_full", SMALL + ["--grad_accum", "65537"], {}, 1, 2,
     ["--grad_accum", "65536"]),
    ("F20", "batch size x gradient accumulation above 2^24 (it wrapped to 0: SIGFPE)", "06_full",
     SMALL + ["--batch_size", "1048576", "--grad_accum", "32"], {}, 1, 2,
     ["--batch_size 1048576 x --grad_accum 32", "16777216"]),
    ("F21", "bucket cap of 1e30 MiB (it became a 1-byte cap)", "06_full",
     SMALL + ["--bucket_cap_mb", "1e30"], {}, 1, 2, ["--bucket_cap_mb", "1024"]),
    ("F22", "epochs above 10^6", "05_metrics_ckpt", SMALL + ["--epochs", "2000000"], {}, 1, 2,
     ["--epochs", "1000000"]),
    ("F23", "max steps above 10^9", "05_metrics_ckpt", SMALL + ["--max_steps", "2000000000"], {}, 1, 2,
     ["--max_steps", "1000000000"]),
    ("F24", "save interval above 10^6", "05_metrics_ckpt", SMALL + ["--save_interval", "2000000"], {}, 1,
     2, ["--save_interval", "1000000"]),
    ("F25", "log interval above 10^9", "05_metrics_ckpt", SMALL + ["--log_interval", "2000000000"], {}, 1,
     2, ["--log_interval", "1000000000"]),
    ("F26", "dataset size above 10^8", "05_metrics_ckpt", SMALL + ["--dataset_size", "200000000"], {}, 1,
     2, ["--dataset_size", "100000000"]),
    ("F27", "timeout of 1e30 seconds", "05_metrics_ckpt", SMALL + ["--timeout", "1e30"], {}, 1, 2,
     ["--timeout", "604800"]),
    ("F28", "hidden size above 2^20 (the model's own bound)", "05_metrics_ckpt",
     SMALL + ["--hidden", "64,2000000"], {}, 1, 2, ["--hidden", "2000000", "1048576"]),
    ("F29", "hidden size beyond any integer", "05_metrics_ckpt",
     SMALL + ["--hidden", "99999999999999999999"], {}, 1, 2, ["--hidden", "99999999999999999999"]),
    # Data files: every dimension checked against the model, every gzip member verified (header CRC,
    # trailer, nothing after the last), only regular files read.
    ("D8", "test images of another size than the training images", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/size"], {}, 2, 1,
     ["{d}/size/t10k-images-idx3-ubyte.gz", "32 x 32", "{d}/size/train-images-idx3-ubyte.gz", "28 x 28"]),
    ("D9", "image file longer than its header's rows x cols", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/trail"], {}, 1, 1, ["{d}/trail/train-images-idx3-ubyte.gz", "more bytes",
                                                   "3 images of 28 x 28"]),
    ("D10", "label file longer than its header says", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/ltrail"],
     {}, 1, 1, ["{d}/ltrail/train-labels-idx1-ubyte.gz", "more bytes", "3 labels"]),
    ("D11", "gzip image file with a flipped bit in its compressed data", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/gzflip"], {}, 1, 1, ["{d}/gzflip/train-images-idx3-ubyte.gz", "corrupt", "gzip"]),
    ("D12", "gzip image file with a wrong CRC-32 in its trailer", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/gzcrc"], {}, 1, 1,
     ["{d}/gzcrc/train-images-idx3-ubyte.gz", "corrupt", "CRC-32 in the trailer"]),
    ("D13", "gzip image file with a wrong size (ISIZE) in its trailer", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/gzsize"], {}, 1, 1,
     ["{d}/gzsize/train-images-idx3-ubyte.gz", "corrupt", "trailer", "says"]),
    ("D14", "gzip file with a header CRC and a wrong CRC-32 in its trailer", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/gzhcrc"], {}, 1, 1,
     ["{d}/gzhcrc/train-images-idx3-ubyte.gz", "corrupt", "CRC-32 in the trailer"]),
    ("D15", "a FIFO as the image file (it blocked every rank)", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/fifo"], {}, 2, 1,
     ["{d}/fifo/train-images-idx3-ubyte.gz", "not a regular file", "FIFO"]),
    ("D16", "the image file a link to /dev/zero (read until memory ran out)", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/zero"], {}, 1, 1,
     ["{d}/zero/train-images-idx3-ubyte.gz", "not a regular file", "character device"]),
    ("D17", "image file with zero rows", "05_metrics_ckpt", IDX + ["--data_dir", "{d}/rows0"], {}, 1, 1,
     ["{d}/rows0/train-images-idx3-ubyte.gz", "3 x 0 x 28"]),
    ("D18", "gzip image file with bytes after its last member", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/gzjunk"], {}, 1, 1,
     ["{d}/gzjunk/train-images-idx3-ubyte.gz", "corrupt", "after its last gzip member"]),
    ("D19", "gzip image file with a wrong header CRC", "05_metrics_ckpt",
     IDX + ["--data_dir", "{d}/gzhcrcbad"], {}, 1, 1,
     ["{d}/gzhcrcbad/train-images-idx3-ubyte.gz", "corrupt", "gzip header"]),
    # Checkpoints: no non-regular file, no impossible counter, no non-finite value is resumed.
    ("C10", "a FIFO as the checkpoint (it blocked every rank)", "05_metrics_ckpt",
     SMALL + ["--resume", "{d}/ck.fifo"], {}, 2, 1, ["{d}/ck.fifo", "not a regular file", "FIFO"]),
    ("C11", "/dev/zero as the checkpoint (read until memory ran out)", "05_metrics_ckpt",
     SMALL + ["--resume", "/dev/zero"], {}, 1, 1, ["/dev/zero", "not a regular file"]),
    ("C12", "checkpoint with a NaN parameter (and a valid CRC)", "05_metrics_ckpt",
     SMALL + ["--resume", "{d}/nan.bin"], {}, 2, 1, ["{d}/nan.bin", "non-finite parameter", "index 0", "nan"]),
    ("C13", "checkpoint with an infinite momentum value", "05_metrics_ckpt",
     SMALL + ["--resume", "{d}/inf.bin"], {}, 1, 1, ["{d}/inf.bin", "optimizer state", "inf"]),
    ("C14", "checkpoint epoch of 2^31", "05_metrics_ckpt", SMALL + ["--resume", "{d}/epoch.bin"], {}, 1, 1,
     ["{d}/epoch.bin", "epoch 2147483648"]),
    ("C15", "checkpoint with more steps into its epoch than steps in all", "05_metrics_ckpt",
     SMALL + ["--resume", "{d}/estep.bin"], {}, 1, 1, ["{d}/estep.bin", "cannot be right"]),
    ("C16", "checkpoint global step of 2^63", "05_metrics_ckpt", SMALL + ["--resume", "{d}/step.bin"], {},
     1, 1, ["{d}/step.bin", "step 9223372036854775808"]),
    ("N1", "a diverging run (--lr 1e30) reaching a save over a good checkpoint", "05_metrics_ckpt",
     SMALL[:-2] + ["--save_interval", "1", "--lr", "1e30", "--ckpt_dir", "{d}/keep"], {}, 1, 1,
     ["diverged"]),
    ("N2", "a diverging run at 2 ranks in step 06 (losses read back asynchronously)", "06_full",
     SMALL[:-4] + ["--epochs", "5", "--save_interval", "0", "--lr", "1e30"], {}, 2, 1,
     ["step 2: the loss is", "diverged"]),
    # A checkpoint saved inside an epoch (--max_steps) resumes only where the rest of the epoch is the same.
    ("C18", "a mid-epoch checkpoint resumed with another batch size (it trained nothing, or repeated samples)",
     "05_metrics_ckpt", SMALL + ["--batch_size", "64", "--resume", "{d}/mid.bin"], {}, 1, 1,
     ["{d}/mid.bin", "stopped 1 steps into epoch 1", "128 samples per step per rank (batch 128 x 1)",
      "this run takes 64 (batch 64 x 1)", "resume with --batch_size 128"]),
    ("C19", "a mid-epoch checkpoint resumed with another --drop_last", "05_metrics_ckpt",
     SMALL + ["--drop_last", "--resume", "{d}/mid.bin"], {}, 1, 1,
     ["{d}/mid.bin", "--drop_last off; this run has it on"]),
    ("C20", "a mid-epoch checkpoint of format version 2 (which does not record the samples per step)",
     "05_metrics_ckpt", SMALL + ["--resume", "{d}/mid2.bin"], {}, 1, 1,
     ["{d}/mid2.bin", "format version 2", "samples per step", "epoch's end"]),
    ("C22", "a mid-epoch checkpoint of a run that changed its world size (format version 5, step 09)",
     "05_metrics_ckpt", SMALL + ["--resume", "{d}/midg.bin"], {}, 1, 1,
     ["{d}/midg.bin", "changed its world size", "global batch 256 at 1 ranks", "step 09", "epoch's end"]),
    ("C21", "a checkpoint resumed on a copy of its images with one pixel changed (same labels)",
     "05_metrics_ckpt", IDX + ["--data_dir", "{d}/pixels_b", "--resume", "{d}/pixels.bin"], {}, 1, 1,
     ["{d}/pixels.bin", "trained on other data", "pixels crc"]),
    ("N3", "a run whose last step makes the parameters non-finite, saving nothing (it ended 'done', exit 0)",
     "05_metrics_ckpt", SMALL + ["--max_steps", "1", "--lr", "1e30", "--weight_decay", "1e30"], {}, 2, 1,
     ["not finite at the end of the run", "diverged"]),
    ("C17", "a checkpoint folder that cannot be written (found at start, not after an epoch)",
     "05_metrics_ckpt", SMALL[:-2] + ["--save_interval", "1", "--ckpt_dir", "/proc/self"], {}, 2, 1,
     ["/proc/self", "not writable"]),
    # Restarts (step 06): --resume auto refuses a bad snapshot as --resume FILE does, never starts fresh.
    ("R1", "--resume auto in a step before 06", "05_metrics_ckpt", SMALL + ["--resume", "auto"], {}, 1, 2,
     ["--resume auto", "step 06"]),
    ("R2", "--resume auto with a corrupt snapshot in --ckpt_dir", "06_full",
     SMALL + ["--resume", "auto", "--ckpt_dir", "{d}/auto_flip"], {}, 2, 1, ["{d}/auto_flip/checkpoint.bin"]),
    ("R3", "negative --save_steps", "06_full", SMALL + ["--save_steps", "-1"], {}, 1, 2, ["--save_steps"]),
    # Per-rank output files.
    ("M2", "metrics path without {rank} at 2 ranks (the ranks overwrote each other)", "05_metrics_ckpt",
     SMALL + ["--metrics", "{d}/m.jsonl"], {}, 2, 2, ["--metrics {d}/m.jsonl", "2 ranks", "{rank}"]),
    ("M3", "trace path without {rank} at 2 ranks (it was invalid JSON)", "06_full",
     SMALL + ["--trace", "{d}/t.json"], {}, 2, 2, ["--trace {d}/t.json", "2 ranks", "{rank}"]),
    ("M4", "one path for --metrics and --trace (the trace overwrote the metrics)", "06_full",
     SMALL + ["--metrics", "{d}/m{rank}.json", "--trace", "{d}/m{rank}.json"], {}, 1, 2,
     ["--metrics and --trace", "{d}/m{rank}.json"]),
]



def mpmd(prog, rank_args, ranks=2):
    """Per-rank programs and arguments for an MPMD launch: rank r gets rank_args[r] (the last one for
    the ranks beyond). prog is one program or a list, one per rank."""
    progs = prog if isinstance(prog, list) else [prog] * ranks
    return [(progs[r], rank_args[min(r, len(rank_args) - 1)]) for r in range(ranks)]


def differ(cid, what, prog, args0, args1, words, ranks=2):
    """A case where rank 0 is started with args0 and every other rank with args1."""
    return (cid, what, prog, mpmd(prog, [args0, args1], ranks), {}, ranks, 1,
            ["the ranks disagree on"] + words)


def disagree(cid, what, prog, flag, a, b, words, base=SMALL, ranks=2):
    """A case where rank 0 is started with `flag a` and every other rank with `flag b`."""
    return differ(cid, what, prog, base + [flag, a], base + [flag, b], words, ranks)


# Ranks that disagree (from step 02 on): every rank ends with one line naming the setting and the
# ranks, before any collective of the wrong size can crash or hang.
DISAGREE = [
    disagree("A1", "ranks with different learning rates", "06_full", "--lr", "0.05", "0.1",
             ["--lr (rank 0: 0.05; rank 1: 0.1)"]),
    disagree("A2", "ranks with different momentum", "05_metrics_ckpt", "--momentum", "0.9", "0.5",
             ["--momentum"]),
    disagree("A3", "ranks with different weight decay", "04_ddp_wrap", "--weight_decay", "0", "0.001",
             ["--weight_decay"]),
    disagree("A4", "ranks with different bucket caps (crashed inside Open MPI before)", "06_full",
             "--bucket_cap_mb", "25", "0.001", ["--bucket_cap_mb"]),
    disagree("A5", "ranks with different hidden layers", "06_full", "--hidden", "11", "11,5",
             ["the model", "784-11-10", "784-11-5-10"], base=SMALL[:-6] + ["--epochs", "1", "--save_interval", "0"]),
    disagree("A6", "ranks with different batch sizes", "05_metrics_ckpt", "--batch_size", "32", "64",
             ["--batch_size"]),
    disagree("A7", "ranks with different gradient accumulation", "06_full", "--grad_accum", "1", "2",
             ["--grad_accum"]),
    disagree("A8", "ranks with different epoch counts", "04_ddp_wrap", "--epochs", "1", "2", ["--epochs"],
             base=SMALL[:-4] + ["--save_interval", "0"]),
    disagree("A9", "ranks with different step limits", "06_full", "--max_steps", "0", "3", ["--max_steps"]),
    disagree("A10", "ranks with different save intervals", "05_metrics_ckpt", "--save_interval", "0", "1",
             ["--save_interval"], base=SMALL[:-2] + ["--ckpt_dir", "{d}/never"]),
    disagree("A11", "ranks with different seeds (the sampler needs one permutation)", "03_sampler",
             "--seed", "1", "2", ["--seed"]),
    disagree("A12", "ranks with different dataset sizes", "02_init", "--dataset_size", "256", "128",
             ["--dataset_size"], base=SMALL[:4] + SMALL[6:]),
    disagree("A13", "ranks with the same flags but different data files", "05_metrics_ckpt", "--data_dir",
             "{d}/labels_a", "{d}/labels_b", ["the data", "labels crc"], base=IDX),
    disagree("A20", "ranks with the same labels but image files that differ in one pixel", "05_metrics_ckpt",
             "--data_dir", "{d}/pixels_a", "{d}/pixels_b", ["the data", "pixels crc"], base=IDX),
    differ("A14", "ranks with and without --drop_last", "03_sampler", SMALL, SMALL + ["--drop_last"],
           ["--drop_last"]),
    differ("A15", "ranks with and without TF32", "06_full", SMALL, SMALL + ["--tf32"], ["--tf32"]),
    differ("A16", "a trace on one rank only", "06_full", SMALL, SMALL + ["--trace", "{d}/never_{rank}.json"],
           ["--trace"]),
    ("A17", "two different steps in one job", ["05_metrics_ckpt", "06_full"],
     mpmd(["05_metrics_ckpt", "06_full"], [SMALL]), {}, 2, 1,
     ["the ranks disagree on the program", "05_metrics_ckpt", "06_full"]),
    ("A18", "ranks resuming checkpoints of different epochs", "06_full",
     mpmd("06_full", [SMALL[:-4] + ["--epochs", "3", "--save_interval", "0", "--resume", "{d}/good.bin"],
                      SMALL[:-4] + ["--epochs", "3", "--save_interval", "0", "--resume", "{d}/good2.bin"]]),
     {}, 2, 1, ["the ranks disagree on the resume point", "rank 0: epoch 1", "rank 1: epoch 2"]),
    disagree("A19", "one rank of three with another learning rate", "06_full", "--lr", "0.05", "0.1",
             ["--lr (rank 0: 0.05; ranks 1, 2: 0.1)"], ranks=3),
]
CASES += DISAGREE


def write_idx(path, magic, dims, payload, gz=True):
    data = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)


def idx_set(folder, images=None, labels=None, test_images=None):
    """A small Fashion-MNIST-shaped dataset: 3 train and 2 test 28x28 images."""
    os.makedirs(folder, exist_ok=True)
    img = images or (2051, [3, 28, 28], bytes(3 * 784))
    lab = labels or (2049, [3], bytes([1, 2, 3]))
    timg = test_images or (2051, [2, 28, 28], bytes(2 * 784))
    write_idx(f"{folder}/train-images-idx3-ubyte.gz", img[0], img[1], img[2])
    write_idx(f"{folder}/train-labels-idx1-ubyte.gz", lab[0], lab[1], lab[2])
    write_idx(f"{folder}/t10k-images-idx3-ubyte.gz", timg[0], timg[1], timg[2])
    write_idx(f"{folder}/t10k-labels-idx1-ubyte.gz", 2049, [2], bytes([0, 1]))


def damage_gzip(folder, damage):
    """Replaces folder's train images with 3 noisy 28x28 images (several KB of gzip), then lets
    damage(bytearray) edit the gzip bytes."""
    noise = bytes((i * 2654435761 >> 13) & 0x3F for i in range(3 * 784))
    idx_set(folder, images=(2051, [3, 28, 28], noise))
    path = f"{folder}/train-images-idx3-ubyte.gz"
    idx = struct.pack(">IIII", 2051, 3, 28, 28) + noise
    z = bytearray(gzip.compress(idx, mtime=0))  # no file name in the header: FLG is 0
    damage(z)
    open(path, "wb").write(bytes(z))


def flip(z, pos, bit=0x01):
    z[pos] ^= bit


def with_header_crc(z, crc_xor=0):
    """The same gzip member with FLG.FHCRC and a correct header CRC (wrong by crc_xor): libdeflate skips
    it, the reader checks it."""
    head = bytearray(z[:10])
    head[3] |= 0x02
    crc = (zlib.crc32(bytes(head)) & 0xFFFF) ^ crc_xor
    z[:] = head + struct.pack("<H", crc) + z[10:]


def checkpoint(d):
    """Writes {d}/good.bin with step 05 (784-16-10), then damaged copies of it."""
    subprocess.run([f"{BIN}/05_metrics_ckpt"] + SMALL[:-2] + ["--save_interval", "1", "--ckpt_dir", f"{d}/ck"],
                   check=True, capture_output=True, env=clean_env())
    good = open(f"{d}/ck/checkpoint.bin", "rb").read()
    shutil.rmtree(f"{d}/ck")
    open(f"{d}/good.bin", "wb").write(good)
    open(f"{d}/trunc.bin", "wb").write(good[: len(good) // 2])
    flip = bytearray(good)
    flip[len(good) // 3] ^= 0x10
    open(f"{d}/flip.bin", "wb").write(bytes(flip))
    os.makedirs(f"{d}/auto_flip")
    open(f"{d}/auto_flip/checkpoint.bin", "wb").write(bytes(flip))
    subprocess.run([f"{BIN}/05_metrics_ckpt"] + SMALL[:-4] + ["--epochs", "2", "--save_interval", "2",
                    "--ckpt_dir", f"{d}/ck2"], check=True, capture_output=True, env=clean_env())
    shutil.move(f"{d}/ck2/checkpoint.bin", f"{d}/good2.bin")
    shutil.rmtree(f"{d}/ck2")
    v = bytearray(good[:-4])
    v[8:12] = struct.pack("<I", 7)
    open(f"{d}/version.bin", "wb").write(bytes(v) + struct.pack("<I", zlib.crc32(bytes(v))))
    open(f"{d}/text.bin", "wb").write(b"these are not the bytes you are looking for\n" * 4)
    # 256 samples at batch 128: --max_steps 1 stops (and saves) 1 step into epoch 1.
    subprocess.run([f"{BIN}/05_metrics_ckpt"] + SMALL[:-2] + ["--max_steps", "1", "--save_interval", "1",
                    "--ckpt_dir", f"{d}/ckm"], check=True, capture_output=True, env=clean_env())
    shutil.move(f"{d}/ckm/checkpoint.bin", f"{d}/mid.bin")
    shutil.rmtree(f"{d}/ckm")
    mid = open(f"{d}/mid.bin", "rb").read()
    steps_at = 56 + 4 * (struct.unpack_from("<I", mid, 52)[0] + 1) + 24  # version 3's step fields
    v2 = bytearray(mid[:steps_at] + mid[steps_at + 16 + 4 + 8:-4])  # as version 2 wrote it (no step fields,
    # no version 4 pixels CRC, no version 5 global batch)
    v2[8:16] = struct.pack("<II", 2, steps_at)
    open(f"{d}/mid2.bin", "wb").write(bytes(v2) + struct.pack("<I", zlib.crc32(bytes(v2))))
    # Version 5's global batch (the header's last 8 bytes: G, then the epoch's world size) of a run that
    # went from 2 ranks to 1 and kept G = 2 x 128: not this run's 1 x 128.
    hs = struct.unpack_from("<I", mid, 12)[0]
    g = bytearray(mid[:-4])
    g[hs - 8:hs] = struct.pack("<II", 256, 2)
    open(f"{d}/midg.bin", "wb").write(bytes(g) + struct.pack("<I", zlib.crc32(bytes(g))))
    # Edits with a valid CRC: header offsets from common/ckpt/ckpt.h's table (epoch 16, steps into the
    # epoch 20, global step 24, header size 12), floats after the header.
    hsize = struct.unpack_from("<I", good, 12)[0]
    n = (len(good) - hsize - 4) // 8  # parameters, then as many optimizer values
    for name, offset, value in (("nan", hsize, struct.pack("<I", 0x7FC00000)),
                                ("inf", hsize + 8 * n - 4, struct.pack("<I", 0x7F800000)),
                                ("epoch", 16, struct.pack("<I", 1 << 31)),
                                ("estep", 20, struct.pack("<I", struct.unpack_from("<Q", good, 24)[0] + 1)),
                                ("step", 24, struct.pack("<Q", 1 << 63))):
        b = bytearray(good[:-4])
        b[offset:offset + len(value)] = value
        open(f"{d}/{name}.bin", "wb").write(bytes(b) + struct.pack("<I", zlib.crc32(bytes(b))))
    os.makedirs(f"{d}/keep")
    open(f"{d}/keep/checkpoint.bin", "wb").write(good)
    os.mkfifo(f"{d}/ck.fifo")
    # Trained on {d}/pixels_a (prepare() makes it), for resuming on {d}/pixels_b: same labels, one pixel other.
    subprocess.run([f"{BIN}/05_metrics_ckpt"] + IDX[:-2] + ["--save_interval", "1", "--data_dir", f"{d}/pixels_a",
                    "--ckpt_dir", f"{d}/ckp"], check=True, capture_output=True, env=clean_env())
    shutil.move(f"{d}/ckp/checkpoint.bin", f"{d}/pixels.bin")
    shutil.rmtree(f"{d}/ckp")


def prepare(d):
    idx_set(f"{d}/magic", images=(2049, [3, 28, 28], bytes(3 * 784)))
    idx_set(f"{d}/trunc", images=(2051, [3, 28, 28], bytes(2 * 784 + 5)))
    idx_set(f"{d}/count", labels=(2049, [2], bytes([1, 2])))
    idx_set(f"{d}/label", labels=(2049, [3], bytes([1, 12, 3])))
    idx_set(f"{d}/labels_a")
    idx_set(f"{d}/labels_b", labels=(2049, [3], bytes([3, 2, 1])))
    idx_set(f"{d}/pixels_a")
    idx_set(f"{d}/pixels_b", images=(2051, [3, 28, 28], bytes(784 + 400) + b"\x01" + bytes(2 * 784 - 401)))
    idx_set(f"{d}/dir")
    os.remove(f"{d}/dir/train-images-idx3-ubyte.gz")
    os.makedirs(f"{d}/dir/train-images-idx3-ubyte.gz")
    idx_set(f"{d}/size", test_images=(2051, [2, 32, 32], bytes(2 * 1024)))
    idx_set(f"{d}/trail", images=(2051, [3, 28, 28], bytes(3 * 784 + 100)))
    idx_set(f"{d}/ltrail", labels=(2049, [3], bytes([1, 2, 3, 4])))
    idx_set(f"{d}/rows0", images=(2051, [3, 0, 28], b""))
    damage_gzip(f"{d}/gzflip", lambda z: flip(z, len(z) // 2))
    damage_gzip(f"{d}/gzcrc", lambda z: flip(z, len(z) - 8))
    damage_gzip(f"{d}/gzsize", lambda z: flip(z, len(z) - 4))
    damage_gzip(f"{d}/gzhcrc", lambda z: (with_header_crc(z), flip(z, len(z) - 8)))
    damage_gzip(f"{d}/gzjunk", lambda z: z.extend(b"\0" * 4))  # as tar-style padding would add
    damage_gzip(f"{d}/gzhcrcbad", lambda z: with_header_crc(z, crc_xor=1))
    for name in ("fifo", "zero"):
        idx_set(f"{d}/{name}")
        os.remove(f"{d}/{name}/train-images-idx3-ubyte.gz")
    os.mkfifo(f"{d}/fifo/train-images-idx3-ubyte.gz")
    os.symlink("/dev/zero", f"{d}/zero/train-images-idx3-ubyte.gz")
    checkpoint(d)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_COMM_WORLD", "PMI", "PMIX", "SLURM")) and k not in ("RANK", "WORLD_SIZE")}
    env.update(extra or {})
    return env


def snapshot(d):
    """Every file under d: regular files by content, others (FIFOs, links to devices) by kind."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            mode = os.stat(p).st_mode
            if stat.S_ISREG(mode):
                out[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()
            else:
                out[p] = f"mode {stat.S_IFMT(mode):o}"
    return out


def run_case(case, d):
    """Runs one case; returns (first stderr line, problems found)."""
    cid, _, prog, args, env, ranks, want_rc, words = case
    if isinstance(args[0], tuple):  # MPMD: (program, arguments) per rank
        cmd = [MPIEXEC]
        for r, (p, a) in enumerate(args):
            cmd += ([":"] if r else []) + ["-n", "1", os.path.join(BIN, p)] + [x.replace("{d}", d) for x in a]
    else:
        args = [a.replace("{d}", d) for a in args]
        cmd = [os.path.join(BIN, prog)] + args
        if ranks > 1:
            cmd = [MPIEXEC, "-n", str(ranks)] + cmd
    # A fixed port (the message names it, and docs/errors.md pastes it), so that no test beside it
    # listens there
    port = int(env["MASTER_PORT"]) if cid in NETWORK_CASES else 0
    if port and not lock_port_pair(port & ~1, wait=60):
        return "", [f"{cid}: ports {port & ~1} and {(port & ~1) + 1} stayed taken for 60 s"]
    before = snapshot(d)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean_env(env), cwd=d)
    except subprocess.TimeoutExpired:
        return "", [f"{cid}: no exit within 60 s (a rank hangs)"]
    problems = []
    lines = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    first = lines[0] if lines else (p.stderr.splitlines() or [""])[0]
    if ranks == 1 and p.returncode != want_rc:
        problems.append(f"{cid}: exit {p.returncode}, expected {want_rc}")
    if ranks > 1 and p.returncode == 0:
        problems.append(f"{cid}: exit 0 at {ranks} ranks")
    for w in words:
        if w.replace("{d}", d).lower() not in first.lower():
            problems.append(f"{cid}: the message does not name '{w}': {first!r}")
    if snapshot(d) != before:
        problems.append(f"{cid}: files in its folder changed")
    return first.replace(d, "DIR"), problems


WORKERS = 2


def main():
    markdown = "--markdown" in sys.argv
    cases = [c for c in CASES if c[0] not in GLOO_CASES or HAVE_GLOO]
    # Two cases at a time (most of a case is starting processes and waiting for their exit), each
    # worker with its own copy of the inputs, so that "files in its folder changed" is its own case's.
    dirs = [tempfile.mkdtemp(prefix="bad-inputs-") for _ in range(WORKERS)]
    try:
        for d in dirs:
            prepare(d)

        def worker(i):
            return [(k, run_case(cases[k], dirs[i])) for k in range(i, len(cases), WORKERS)]

        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            done = sorted(r for part in pool.map(worker, range(WORKERS)) for r in part)
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
    problems, rows = [], []
    for k, (first, probs) in done:
        problems += probs
        rows.append((cases[k], first))
    if markdown:
        print(HEADER)
        print("| # | bad input | program (ranks) | exit | what it prints (first line, DIR = a temporary folder) |")
        print("| --- | --- | --- | --- | --- |")
        for (cid, what, prog, _, env, ranks, rc, _), first in rows:
            prog = prog if isinstance(prog, str) else " and ".join(prog)
            how = f"{prog} ({ranks})" + (" with " + " ".join(f"{k}={v}" for k, v in env.items()) if env else "")
            msg = first.replace("|", "\\|").replace("`", "'")
            print(f"| {cid} | {what} | {how} | {rc if ranks == 1 else 'non-zero'} | `{msg}` |")
    for p in problems:
        print(p, file=sys.stderr)
    if not markdown:
        print(f"{len(cases) - len({p.split(':')[0] for p in problems})} passed, "
              f"{len({p.split(':')[0] for p in problems})} failed")
    return 1 if problems else 0


HEADER = """# Bad input: what each program says

Generated by `python3 tests/integration/bad_inputs.py --markdown > docs/errors.md`, which runs every
case; CTest runs the same cases as `bad_input_catalogue`. Each case must end every rank with a
non-zero exit (2 for a bad command line, 1 otherwise) and one line that names the problem, within
60 s, and must leave the files it was given unchanged (N1: a diverging run must not replace the good
checkpoint in its --ckpt_dir). Multi-rank cases run under `mpirun`, whose abort then ends every rank.
Unit tests cover more cases of the same readers (`tests/unit/test_args.cpp`, `test_data.cpp`,
`test_ckpt.cpp`, `test_metrics.cpp`, `test_rankfile.cpp`, `test_loss_log.cpp`),
`tests/fault/kill_rank.py` covers a rank that dies, and the `launcher_signal` integration scenario
covers `scripts/launch.sh` being interrupted.
"""

if __name__ == "__main__":
    sys.exit(main())
