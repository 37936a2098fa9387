#!/usr/bin/env bash
# Two nodes on one machine: two network namespaces joined by a veth pair, each with its own address,
# its own host name (a UTS namespace: nodea, nodeb) and its own private checkpoint disk (a mount
# namespace binds DIR/disk-<node> on DIR/ckpt). Used by two_nodes.sh (the `multinode` test) and by
# bench/payoff.py (the slow-link benchmark), which make and remove the nodes through it:
#   tests/multinode/nodes.sh up ID DIR     makes namespaces ddpmn-ID-a and -b, veth ddpaID (in a) and
#                                          ddpbID (in b), addresses 10.213.(ID mod 250).1 and .2/24;
#                                          writes DIR/enter, DIR/hosts (a then b, 2 slots each),
#                                          DIR/hosts_ba (b then a) and DIR/nodes.env (the names above,
#                                          as shell assignments: nsa nsb va vb net)
#   tests/multinode/nodes.sh down ID DIR   stops every process in the two namespaces, deletes them
#                                          (and with them the veths and their qdiscs); DIR stays
# `DIR/enter NODE CMD...` runs CMD on NODE (nodea, nodeb, or its address): its network, host name
# and private disk; Open MPI's rsh launch agent can be that script, as ssh would log in to a host.
# `up` without root, ip, unshare or the right to make namespaces: one line, exit 77 (CTest's skip),
# nothing made. `up` that fails half-way removes what it made.
set -euo pipefail
usage() { echo "usage: $0 up|down ID DIR" >&2; exit 2; }
[ $# -eq 3 ] || usage
cmd=$1 id=$2 dir=$3
[[ $id =~ ^[0-9]{1,7}$ ]] || { echo "$0: ID must be a number (0..9999999), got '$id'" >&2; exit 2; }
nsa=ddpmn-$id-a nsb=ddpmn-$id-b
va=ddpa$id vb=ddpb$id
net=10.213.$((id % 250))

down() {
  local ns pid
  for ns in "$nsa" "$nsb"; do
    ip netns list 2>/dev/null | grep -q "^$ns\( \|$\)" || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$va" 2>/dev/null || true
}

up() {
  skip() { echo "multinode: skipped: $*"; exit 77; }
  [ "$(id -u)" -eq 0 ] || skip "namespaces need root, and this is uid $(id -u)"
  command -v ip >/dev/null || skip "ip not found (Debian's iproute2)"
  command -v unshare >/dev/null || skip "unshare not found (util-linux)"
  mkdir -p "$dir"
  ip netns add "$nsa" 2>/dev/null || skip "cannot make a network namespace here (ip netns add)"
  trap 'down' ERR
  ip netns add "$nsb"
  ip link add "$va" type veth peer name "$vb"
  ip link set "$va" netns "$nsa"
  ip link set "$vb" netns "$nsb"
  ip -n "$nsa" addr add "$net.1/24" dev "$va"
  ip -n "$nsb" addr add "$net.2/24" dev "$vb"
  for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
  ip -n "$nsa" link set "$va" up
  ip -n "$nsb" link set "$vb" up
  mkdir -p "$dir/ckpt" "$dir/disk-nodea" "$dir/disk-nodeb"
  # enter NODE CMD...: run CMD on NODE (its network, host name and private checkpoint disk).
  cat >"$dir/enter" <<EOF
#!/bin/bash
node=\$1; shift
case "\$node" in nodea|$net.1) ns=$nsa node=nodea ;; nodeb|$net.2) ns=$nsb node=nodeb ;;
  *) echo "enter: no node \$node" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts --mount --propagation private \\
  sh -c "hostname \$node && mount --bind $dir/disk-\$node $dir/ckpt && exec sh -c \\"\\\$0\\"" "\$*"
EOF
  chmod +x "$dir/enter"
  printf '%s slots=2\n%s slots=2\n' "$net.1" "$net.2" >"$dir/hosts"
  printf '%s slots=2\n%s slots=2\n' "$net.2" "$net.1" >"$dir/hosts_ba"
  printf 'nsa=%s\nnsb=%s\nva=%s\nvb=%s\nnet=%s\n' "$nsa" "$nsb" "$va" "$vb" "$net" >"$dir/nodes.env"
}

case $cmd in
  up) up ;;
  down) down ;;
  *) usage ;;
esac
