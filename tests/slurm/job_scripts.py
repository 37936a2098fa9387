#!/usr/bin/env python3
"""The job scripts' choices of port and GPUs (scripts/slurm/*.sbatch, scripts/slurm/job_env.sh),
checked without Slurm: each script runs under bash with stand-ins for srun, scontrol and nvidia-smi
(which print what they were given) and a made-up job environment.

- MASTER_PORT and MASTER_PORT + 1 lie below Linux's ephemeral range, for any job id (the old rule,
  20000 + 2 * (id mod 10000), reached 39998: inside the range for 36 % of the ids);
- a pair of which a socket of this machine holds either port is skipped for the next pair (ids 10000
  apart once shared a port without a word);
- the GPUs counted are the job's (SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES), not nvidia-smi's: a job
  that asked for none runs on CPUs on a GPU node, and one that holds 2 of a node's 4 asks for 2.
Standard library only.
"""
import os
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SLURM = os.path.join(ROOT, "scripts", "slurm")
JOB_ENV = os.path.join(SLURM, "job_env.sh")


class Failure(Exception):
    pass


def ephemeral_start():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        return int(f.read().split()[0])


def stubs(folder):
    """srun, scontrol and an nvidia-smi that lists 4 GPUs, in folder (to put first on PATH)."""
    files = {
        "srun": '#!/bin/sh\necho "SRUN $* MASTER_PORT=${MASTER_PORT:-unset}"\n',
        "scontrol": '#!/bin/sh\necho node1\n',
        "nvidia-smi": '#!/bin/sh\nfor i in 0 1 2 3; do echo "GPU $i: NVIDIA H100 (UUID: GPU-$i)"; done\n',
    }
    for name, text in files.items():
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)


def job_env(tmp, job_id, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM") and k not in ("MASTER_PORT", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES")}
    env.update(PATH=f"{tmp}/bin:{env.get('PATH', '/usr/bin:/bin')}", SLURM_JOB_ID=str(job_id),
               SLURM_JOB_NODELIST="node1", SLURM_NTASKS="2", SLURM_SUBMIT_DIR=ROOT, DDP_RUNS=f"{tmp}/runs",
               DDP_BIN="/bin/true")
    env.update(extra)
    return env


def sbatch(tmp, script, job_id, **extra):
    """Runs scripts/slurm/<script> as a job would (bash, from the repository's root); its stdout."""
    p = subprocess.run(["bash", os.path.join(SLURM, script), "--device", "cpu"], capture_output=True,
                       text=True, cwd=ROOT, env=job_env(tmp, job_id, **extra), timeout=60)
    if p.returncode != 0:
        raise Failure(f"{script} (job {job_id}, {extra}) exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def srun_line(out):
    lines = [l for l in out.splitlines() if l.startswith("SRUN ")]
    if len(lines) != 1:
        raise Failure(f"expected one srun call, got:\n{out}")
    return lines[0]


def port_of(out):
    return int(srun_line(out).rsplit("MASTER_PORT=", 1)[1])


def function(name, *args, env=None):
    """Runs a function of job_env.sh; its stdout, stripped."""
    cmd = ["bash", "-c", f'source "{JOB_ENV}" && {name} "$@"', "bash"] + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    if p.returncode != 0:
        raise Failure(f"{name} {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p.stdout.strip()


def check_pair(port, where):
    eph = ephemeral_start()
    if not (1024 <= port and port % 2 == 0 and port + 1 < eph):
        raise Failure(f"{where}: MASTER_PORT {port}: it and {port + 1} must lie below the ephemeral "
                      f"range, which starts at {eph}")


def ports(tmp):
    # 9999 and 19999: the old rule's 39998; 6383 and 6384: the last and first of the new pairs.
    for job_id in (0, 1, 6383, 6384, 9999, 16383, 19999, 123456789):
        out = sbatch(tmp, "workshop.sbatch", job_id)
        port = port_of(out)
        check_pair(port, f"workshop.sbatch, job {job_id}")
        if f"port {port} " not in out:
            raise Failure(f"workshop.sbatch, job {job_id}: its job line does not show port {port}:\n{out}")
        gpu = sbatch(tmp, "train.sbatch", job_id, SLURM_GPUS_ON_NODE="1")
        check_pair(port_of(gpu), f"train.sbatch, job {job_id}")
    print(f"job ids 0 .. 123456789: every pair below {ephemeral_start()}")


def held_pairs(tmp):
    for job_id, held in ((9999, 0), (9999, 1), (10005, 0)):
        first = port_of(sbatch(tmp, "workshop.sbatch", job_id))
        with socket.socket() as s:  # a socket of this machine holds the port (or the one after it)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", first + held))
            except OSError:
                continue  # someone else holds it: the script must have skipped it already
            s.listen()
            again = port_of(sbatch(tmp, "workshop.sbatch", job_id))
            check_pair(again, f"job {job_id} with {first + held} held")
            if again in (first, first + held - 1, first + held):
                raise Failure(f"job {job_id}: port {first + held} is held, and the job still takes "
                              f"{again} and {again + 1}")
            print(f"job {job_id}: {first + held} held, moved from {first} to {again}")
    # the function alone, against made-up socket tables: every pair held but the last
    with tempfile.TemporaryDirectory() as net:
        eph = ephemeral_start()
        last = eph - 2 - (eph % 2)
        rows = ["  sl  local_address rem_address   st"]
        rows += [f"{i}: 00000000:{p:04X} 00000000:0000 0A" for i, p in enumerate(range(20000, last))]
        for name in ("tcp", "tcp6"):
            with open(os.path.join(net, name), "w") as f:
                f.write("\n".join(rows if name == "tcp" else rows[:1]) + "\n")
        got = int(function("ddp_job_port", 7, env=dict(os.environ, DDP_PROC_NET=net)))
        if got != last:
            raise Failure(f"every pair below {last} held: ddp_job_port gave {got}, expected {last}")
        print(f"every pair but the last held: {got}")


def gpus(tmp):
    cases = [
        ({}, 0, "no GPU asked for, nvidia-smi lists 4"),
        ({"SLURM_GPUS_ON_NODE": "2"}, 2, "2 of the node's 4"),
        ({"SLURM_GPUS_ON_NODE": "0"}, 0, "SLURM_GPUS_ON_NODE=0"),
        ({"CUDA_VISIBLE_DEVICES": "1,3,4"}, 3, "CUDA_VISIBLE_DEVICES of 3"),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, "CUDA_VISIBLE_DEVICES empty"),
    ]
    for extra, want, what in cases:
        for script in ("train.sbatch", "workshop.sbatch"):
            line = srun_line(sbatch(tmp, script, 42, **extra))
            cpu = "--mpi=pmix" in line
            if want == 0 and not cpu:
                raise Failure(f"{script}, {what}: took the GPU path: {line}")
            if want > 0 and cpu:
                raise Failure(f"{script}, {what}: took the CPU path: {line}")
            if script == "train.sbatch" and want > 0 and f"--gpus-per-node={want} " not in line:
                raise Failure(f"{script}, {what}: expected --gpus-per-node={want}: {line}")
        print(f"{what}: {want} GPU(s)")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(f"{tmp}/bin")
        stubs(f"{tmp}/bin")
        try:
            for check in (ports, held_pairs, gpus):
                check(tmp)
        except Failure as e:
            print(f"FAILED: {e}", file=sys.stderr)
            return 1
    print("ok slurm_job_scripts: ports below the ephemeral range, held pairs skipped, the job's GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
