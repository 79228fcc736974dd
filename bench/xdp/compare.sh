#!/usr/bin/env bash
# Runs two builds of xdp_ingress_bench alternately (A, B, A, B, ...) on the same machine and prints,
# per fixture class, each build's median "diff ns" (ingress over the bare XDP_PASS of the same
# run) over the pairs, and B - A. Both builds time the same fixtures with the same
# configuration; only the program differs. `uptime` load is printed before and after.
#
#   bench/xdp/compare.sh <bench A (before)> <bench B (after)> [pairs=3] [repeat=200000]
#                        [rounds=5] [-- extra bench flags, e.g. --afxdp]
set -euo pipefail
a=$1 b=$2
pairs=${3:-3} repeat=${4:-200000} rounds=${5:-5}
shift $(( $# < 5 ? $# : 5 ))
[ "${1:-}" = "--" ] && shift
out=$(mktemp -d /tmp/ig-xdp-compare.XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "# load before: $(uptime)"
for i in $(seq "$pairs"); do
  "$a" "$repeat" "$rounds" "$@" >"$out/a.$i"
  "$b" "$repeat" "$rounds" "$@" >"$out/b.$i"
done
echo "# load after:  $(uptime)"
echo "# $pairs pairs, xdp_ingress_bench $repeat $rounds $*; diff ns = ingress - bare XDP_PASS, median over pairs"
/usr/bin/python3 - "$out" <<'PY'
import glob, statistics, sys
out = sys.argv[1]
diff, order = {}, []
for side in "ab":
    for path in sorted(glob.glob(f"{out}/{side}.*")):
        for line in open(path):
            f = line.split()
            if line.startswith("#") or len(f) != 6 or f[0] == "class":
                continue
            if f[0] not in order:
                order.append(f[0])
            diff.setdefault((side, f[0]), []).append(float(f[4]))
print(f"{'class':<14} {'A diff ns':>12} {'B diff ns':>12} {'B - A':>10} {'B / A':>8}")
for k in order:
    a = statistics.median(diff[("a", k)])
    b = statistics.median(diff[("b", k)])
    print(f"{k:<14} {a:12.1f} {b:12.1f} {b - a:10.1f} {b / a if a > 0 else 0:8.2f}")
PY
