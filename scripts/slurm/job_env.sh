# shellcheck shell=bash
# What the job scripts (train.sbatch, workshop.sbatch) work out from the job and the node, as shell
# functions: sourced by them, and by tests/slurm/job_scripts.py, which runs them without Slurm.
# sbatch runs a copy of the job script from its spool folder, so they find this file in the folder the
# job was submitted from (SLURM_SUBMIT_DIR): submit from the repository's root.

# ddp_job_gpus: how many GPUs this job holds on this node, from the allocation, never from the node:
# SLURM_GPUS_ON_NODE (set when the job asked for GPUs: --gpus-per-node, --gres=gpu:N, --gpus), else
# the entries of SLURM_JOB_GPUS, else those of CUDA_VISIBLE_DEVICES (older Slurm sets only that),
# else 0. `nvidia-smi -L` lists every GPU of the node: where the cluster does not confine devices
# (ConstrainDevices=yes in cgroup.conf) that includes other jobs' GPUs, and a job that asked for no
# GPU would take the GPU path on a GPU node.
ddp_job_gpus() {
  local list
  if [[ "${SLURM_GPUS_ON_NODE:-}" =~ ^[0-9]+$ ]]; then
    echo "$((10#$SLURM_GPUS_ON_NODE))"
    return
  fi
  list=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
  if [ -z "$list" ] || [ "$list" = NoDevFiles ] || [[ "$list" == -* ]]; then
    echo 0  # none, or CUDA's way of hiding every GPU (-1, NoDevFiles)
    return
  fi
  local IFS=,
  # shellcheck disable=SC2086  # split on the commas
  set -- $list
  echo $#
}

# ddp_ports_in_use: every local TCP port of this node's sockets (listening, connected or closing), one
# per line, from /proc/net/tcp and tcp6 (DDP_PROC_NET: another folder with those files, for tests).
ddp_ports_in_use() {
  local f addr
  for f in "${DDP_PROC_NET:-/proc/net}/tcp" "${DDP_PROC_NET:-/proc/net}/tcp6"; do
    [ -r "$f" ] || continue
    while read -r _ addr _; do
      [[ "$addr" == *:* ]] || continue  # the header line
      echo "$((16#${addr##*:}))"
    done < <(cat "$f")  # cat: bash reads a file of /proc a byte at a time, each read costing a pass
  done
}

# ddp_job_port JOB_ID: a MASTER_PORT for the job, printed. The job uses two ports, MASTER_PORT and
# MASTER_PORT + 1 (NCCL's bootstrap root, Gloo's store), so the port is even and both lie in
# [20000, E), E being the start of Linux's ephemeral range (the first number of
# /proc/sys/net/ipv4/ip_local_port_range, 32768 by default): ports there are handed to any client
# socket of the node, which may hold one when the job starts. The job's id picks the first pair to
# try, 20000 + 2 * (JOB_ID mod the number of pairs); a pair that a socket of this node holds is
# skipped for the next one. Two jobs of one node therefore get different ports unless they start at
# the same moment with ids a multiple of the number of pairs (6384 by default) apart.
ddp_job_port() {
  local id=$1 lo=20000 eph hi pairs i p
  if ! [[ "$id" =~ ^[0-9]+$ ]]; then
    echo "ddp_job_port: job id '$id' is not a number" >&2
    return 2
  fi
  read -r eph _ <"${DDP_PORT_RANGE_FILE:-/proc/sys/net/ipv4/ip_local_port_range}" 2>/dev/null || eph=32768
  [[ "$eph" =~ ^[0-9]+$ ]] || eph=32768
  hi=$((eph - 2))  # the last even port whose pair stays below the ephemeral range
  if [ "$hi" -lt "$lo" ]; then lo=1024; fi
  if [ "$hi" -lt "$lo" ]; then
    echo "ddp_job_port: the ephemeral ports start at $eph: no pair of ports below them" >&2
    return 1
  fi
  pairs=$(((hi - lo) / 2 + 1))
  local -A used=()
  while read -r p; do used[$p]=1; done < <(ddp_ports_in_use)
  for ((i = 0; i < pairs; i++)); do
    p=$((lo + 2 * ((10#$id + i) % pairs)))
    if [ -z "${used[$p]:-}" ] && [ -z "${used[$((p + 1))]:-}" ]; then
      echo "$p"
      return 0
    fi
  done
  echo "ddp_job_port: every pair of ports in [$lo, $eph) is in use on $(hostname)" >&2
  return 1
}
