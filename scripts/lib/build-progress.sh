# Build progress for scripts/demo.sh (sourced): a fresh machine spends minutes installing
# packages and compiling, and a newcomer should see that it is working without reading
# thousands of compiler lines.
#
#   run_build LOG CMD...   runs CMD (stdout and stderr) with its whole output kept in LOG and
#                          shown as progress: the install-deps lines, "configuring", ninja's
#                          [n/N] steps (one updating line on a terminal; otherwise one line per
#                          max(10, N/20) steps). On failure it prints the error (from ninja's
#                          first "FAILED:" or CMake's / apt's first error line to the end, at most
#                          200 lines; the last 60 lines when none is found) and returns CMD's status.
#   build_progress LOG     the filter alone (stdin -> progress on stdout, everything to LOG).

build_progress() {
  local tty=0
  [ -t 1 ] && tty=1
  awk -v tty="$tty" -v logf="$1" '
    function show(s) { print s; fflush() }
    {
      print > logf
    }
    /^install-deps: / {
      show("demo: " $0)
      if ($0 ~ /already installed|: done$/) show("demo: configuring (cmake)...")
      next
    }
    /^\[[0-9]+\/[0-9]+\] / {
      split(substr($1, 2, length($1) - 2), nn, "/")
      n = nn[1] + 0; total = nn[2] + 0
      if (total != last_total) {  # the first step, or ninja restarted after re-running cmake
        if (pending) { printf "\n"; pending = 0 }
        show("demo: building: " total " steps")
        last_total = total
        every = int(total / 20); if (every < 10) every = 10
        next_at = every
      }
      what = $NF
      if (tty) {
        line = sprintf("demo: building [%d/%d] %3d%%  %s", n, total, total ? 100 * n / total : 100, what)
        if (length(line) > 78) line = substr(line, 1, 78)
        printf "\r\033[K%s", line; fflush()
        pending = 1
      } else if (n >= next_at || n == total) {
        show(sprintf("demo: building [%d/%d] %d%%", n, total, total ? 100 * n / total : 100))
        while (next_at <= n) next_at += every
      }
      next
    }
    /^ninja: no work to do/ { show("demo: the build is up to date"); next }
    END { if (pending) { printf "\n"; fflush() } }
  '
}

run_build() {
  local log=$1
  shift
  local rc=0 errexit=0
  [[ $- == *e* ]] && errexit=1
  set +e
  "$@" 2>&1 | build_progress "$log"
  rc=${PIPESTATUS[0]}
  [ "$errexit" -eq 1 ] && set -e
  if [ "$rc" -ne 0 ]; then
    echo "demo: the build failed (exit status $rc); the error:" >&2
    local first
    first=$(grep -n -m1 -E '^FAILED: |^CMake Error|^E: |error:' "$log" | cut -d: -f1)
    if [ -n "$first" ]; then
      tail -n "+$first" "$log" | head -200 >&2
    else
      tail -60 "$log" >&2
    fi
    echo "demo: the whole build output is in $log" >&2
  fi
  return "$rc"
}
