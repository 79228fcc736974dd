# Sourced by the namespace demos (demo-xdp.sh, demo-afxdp.sh): two fresh network namespaces
# joined by a veth pair, unique per process, removed on exit (with the gateway process, if
# GW_PID is set, and the work folder).
#   demo_netns_setup <interface-prefix> <subnet-second-octet>
# sets GW CL (namespaces), GIF CIF (interfaces), GW_IP CL_IP, WORK.
source "$(dirname "${BASH_SOURCE[0]}")/netns.sh"

demo_netns_setup() {
  local tag=$$
  GW=ig-demo-gw-$tag; CL=ig-demo-cl-$tag; GIF=${1}g$tag; CIF=${1}c$tag
  GW_IP=10.$2.$((tag % 250)).1; CL_IP=10.$2.$((tag % 250)).2
  WORK=$(mktemp -d /tmp/infergate-demo.XXXXXX)
  trap demo_netns_cleanup EXIT
  veth_pair_up "$GW" "$CL" "$GIF" "$CIF" "$GW_IP" "$CL_IP"
}

demo_netns_cleanup() {
  [ -n "${GW_PID:-}" ] && kill -TERM "$GW_PID" 2>/dev/null && wait "$GW_PID" 2>/dev/null || true
  ip netns del "$GW" 2>/dev/null || true
  ip netns del "$CL" 2>/dev/null || true
  rm -rf "$WORK"
}
