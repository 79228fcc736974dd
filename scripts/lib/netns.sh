# Sourced by the demos and benchmarks that need two network namespaces joined by a veth pair.
#   veth_pair_up <gw-ns> <client-ns> <gw-if> <client-if> <gw-ip> <client-ip>
# creates both namespaces, the pair (a /24), brings every link up (loopbacks too), and turns
# GRO on and checksum offload off at the client end: frames the XDP program sends back
# (XDP_TX/redirect) reach a veth peer only with GRO on there, and the client's kernel then
# checksums in software so every receiver sees final checksums. Removing the namespaces is
# the caller's (ip netns del), as its cleanup differs.
veth_pair_up() {
  local gw=$1 cl=$2 gif=$3 cif=$4 gw_ip=$5 cl_ip=$6
  ip netns add "$gw"; ip netns add "$cl"
  ip link add "$gif" netns "$gw" type veth peer name "$cif" netns "$cl"
  ip -n "$gw" addr add "$gw_ip/24" dev "$gif"; ip -n "$cl" addr add "$cl_ip/24" dev "$cif"
  for ns in "$gw" "$cl"; do ip -n "$ns" link set lo up; done
  ip -n "$gw" link set "$gif" up; ip -n "$cl" link set "$cif" up
  ip netns exec "$cl" ethtool -K "$cif" gro on tx off >/dev/null 2>&1 || true
}

#   ns_exec <ns> <command...> &
# runs the command in the namespace with a bpffs mounted there (`ip netns exec` hides the
# host's). It execs, so call it in the background: $! is then the command's own pid, and
# killing it stops the command (a plain function run with & is a subshell: its $! would be
# the subshell, and killing that orphans the command).
ns_exec() {
  local ns=$1
  shift
  exec ip netns exec "$ns" sh -c 'mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf; exec "$@"' sh "$@"
}
