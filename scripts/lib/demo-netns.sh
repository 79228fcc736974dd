# Sourced by the namespace demos (demo-xdp.sh, demo-afxdp.sh): two fresh network namespaces
# joined by a veth pair, unique per process, removed on exit (with the gateway process, if
# GW_PID is set, and the work folder).
#   demo_netns_setup <interface-prefix> <subnet-second-octet>
# sets GW CL (namespaces), GIF CIF (interfaces), GW_IP CL_IP, WORK.
demo_netns_setup() {
  local tag=$$
  GW=ig-demo-gw-$tag; CL=ig-demo-cl-$tag; GIF=${1}g$tag; CIF=${1}c$tag
  GW_IP=10.$2.$((tag % 250)).1; CL_IP=10.$2.$((tag % 250)).2
  WORK=$(mktemp -d /tmp/infergate-demo.XXXXXX)
  trap demo_netns_cleanup EXIT
  ip netns add "$GW"; ip netns add "$CL"
  ip link add "$GIF" netns "$GW" type veth peer name "$CIF" netns "$CL"
  ip -n "$GW" addr add "$GW_IP/24" dev "$GIF"; ip -n "$CL" addr add "$CL_IP/24" dev "$CIF"
  for ns in "$GW" "$CL"; do ip -n "$ns" link set lo up; done
  ip -n "$GW" link set "$GIF" up; ip -n "$CL" link set "$CIF" up
  # Frames the XDP program sends back (XDP_TX/redirect) reach a veth peer only with GRO on
  # there; the client's kernel checksums in software so every receiver sees final checksums.
  ip netns exec "$CL" ethtool -K "$CIF" gro on tx off >/dev/null 2>&1 || true
}

demo_netns_cleanup() {
  [ -n "${GW_PID:-}" ] && kill -TERM "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null || true
  ip netns del "$GW" 2>/dev/null || true
  ip netns del "$CL" 2>/dev/null || true
  rm -rf "$WORK"
}
