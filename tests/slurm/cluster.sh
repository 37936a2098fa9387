#!/usr/bin/env bash
# A real single-node Slurm cluster for the tests, in a temporary folder of its own.
#   tests/slurm/cluster.sh start POINTER   start munged, slurmctld and slurmd; wait until the node is idle
#   tests/slurm/cluster.sh stop POINTER    cancel its jobs, stop exactly the daemons it started (by pid)
# POINTER is a file (e.g. build/slurm_cluster) into which `start` writes the cluster's folder: its
# slurm.conf (export SLURM_CONF=<folder>/slurm.conf to use the cluster), its own munge key and socket,
# state, spool and log folders, and ports on loopback chosen free at start. Nothing under /etc is read.
# The node is one node (ddpnode, 127.0.0.1) with CPUs=8 whatever the machine has
# (SlurmdParameters=config_overrides), so that -n 3 and several workshop jobs fit on a 2-core machine;
# select/cons_tres shares it between jobs. ProctrackType=proctrack/linuxproc and TaskPlugin=task/none:
# no cgroups, which containers and CI machines often lack.
# Needs root and Debian's slurm-wlm and munge; without them `start` prints one line and exits 77
# (CTest's skip code), and the tests that need the cluster skip as well.
set -euo pipefail
cmd=${1:-}
pointer=${2:-}
[ -n "$cmd" ] && [ -n "$pointer" ] || { echo "usage: $0 start|stop POINTER" >&2; exit 2; }

# The reason this machine cannot run the cluster, or nothing.
why_not() {
  local b
  for b in munged mungekey slurmctld slurmd srun sbatch sinfo scancel; do
    command -v "$b" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$b" >/dev/null 2>&1 ||
      { echo "$b not found (install Debian's slurm-wlm and munge: scripts/test.sh does)"; return; }
  done
  [ "$(id -u)" -eq 0 ] || { echo "the daemons run as root here, and this is uid $(id -u)"; return; }
  ls /usr/lib/*/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 ||
    { echo "Slurm's pmix plugin (mpi_pmix.so, package slurm-wlm-basic-plugins) is missing"; return; }
}

# kill_started NAME PID: ends PID if it is still the program NAME (a recycled pid is left alone).
kill_started() {
  local name=$1 pid=$2 i
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$name" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  echo "cluster: $name (pid $pid) ignored SIGTERM for 5 s: SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  local dir
  [ -f "$pointer" ] || { echo "cluster: no cluster recorded in $pointer"; return 0; }
  dir=$(cat "$pointer")
  if [ -f "$dir/slurmctld.pid" ]; then
    # Jobs first, so that no slurmstepd or rank outlives the daemons.
    SLURM_CONF=$dir/slurm.conf scancel --quiet --full --user=root 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1
    done
  fi
  [ -f "$dir/slurmd.pid" ] && kill_started slurmd "$(cat "$dir/slurmd.pid")"
  [ -f "$dir/slurmctld.pid" ] && kill_started slurmctld "$(cat "$dir/slurmctld.pid")"
  [ -f "$dir/munged.pid" ] && kill_started munged "$(cat "$dir/munged.pid")"
  case "$dir" in /tmp/ddp-slurm.*) rm -rf "$dir" ;; esac
  rm -f "$pointer"
  echo "cluster: stopped ($dir)"
}

# free_ports N: N TCP ports free on loopback now.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

start() {
  local reason dir ports ctl_port d_port host i state
  reason=$(why_not)
  if [ -n "$reason" ]; then echo "cluster: skipped: $reason"; exit 77; fi
  export PATH=$PATH:/usr/sbin
  [ -f "$pointer" ] && { echo "cluster: a cluster is already recorded in $pointer: stopping it"; stop; }
  dir=$(mktemp -d /tmp/ddp-slurm.XXXXXX)
  echo "$dir" >"$pointer"
  trap 'echo "cluster: start failed; logs:"; tail -n 20 "$dir"/*.log 2>/dev/null; stop; exit 1' ERR
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"
  read -r ctl_port d_port <<<"$(free_ports 2)"
  host=$(hostname -s)

  mungekey --create --keyfile="$dir/munge/munge.key" --force
  chmod 600 "$dir/munge/munge.key"
  setsid munged --foreground --force --socket="$dir/munge/munge.sock" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pidfile" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/munged.log" 2>&1 &
  echo $! >"$dir/munged.pid"
  for i in $(seq 50); do [ -S "$dir/munge/munge.sock" ] && break; sleep 0.1; done
  [ -S "$dir/munge/munge.sock" ] || { echo "cluster: munged did not open its socket"; false; }

  cat >"$dir/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh: a single-node test cluster, all of it under $dir.
ClusterName=ddptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pidfile
SlurmdPidFile=$dir/slurmd.pidfile
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=3
InactiveLimit=0
MinJobAge=30
MailProg=/bin/true
NodeName=ddpnode NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ddpnode Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  setsid slurmctld -D -i -f "$SLURM_CONF" </dev/null >>"$dir/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  setsid slurmd -D -N ddpnode -f "$SLURM_CONF" </dev/null >>"$dir/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"
  for i in $(seq 300); do
    state=$(sinfo -h -n ddpnode -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null || { echo "cluster: slurmctld exited"; false; }
    kill -0 "$(cat "$dir/slurmd.pid")" 2>/dev/null || { echo "cluster: slurmd exited"; false; }
    sleep 0.1
  done
  [ "$state" = idle ] || { echo "cluster: node ddpnode is '$state' after 30 s, not idle"; false; }
  trap - ERR
  echo "cluster: up in $dir (slurmctld on 127.0.0.1:$ctl_port, slurmd on :$d_port, node idle after $((i / 10)).$((i % 10)) s)"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop POINTER" >&2; exit 2 ;;
esac
