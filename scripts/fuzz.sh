#!/usr/bin/env bash
# Runs one fuzz target for longer than CI does, keeping what it learns: configures and builds
# build-fuzz (clang, docs/FUZZING.md) when needed, replays the target's regression inputs, then
# fuzzes a corpus kept in a work directory (seeded from tests/fuzz/corpus/<target>/ the first
# time) with the target's dictionary. At the end it prints executions, coverage (cov: edges,
# ft: features) and corpus size; findings are left in the work directory's findings/.
#
#   scripts/fuzz.sh TARGET [SECONDS]        e.g. scripts/fuzz.sh fuzz_http2 1800
#   FUZZ_WORK=dir (default /tmp/infergate-fuzz/TARGET), FUZZ_JOBS=2 for two processes,
#   FUZZ_BUILD=dir (default build-fuzz), FUZZ_NICE=10 to run at a lower priority.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS] (targets: tests/fuzz/run.sh lists them)}
target=fuzz_${target#fuzz_}
secs=${2:-600}
build=${FUZZ_BUILD:-build-fuzz}
work=${FUZZ_WORK:-/tmp/infergate-fuzz/$target}
jobs=${FUZZ_JOBS:-1}

if [ ! -f "$build/build.ninja" ] || ! grep -q 'INFERGATE_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DINFERGATE_FUZZ=ON -DINFERGATE_BUILD_TESTS=ON -DINFERGATE_BUILD_BENCH=OFF \
    -DINFERGATE_WITH_XDP=OFF >/dev/null
fi
# The build lock is shared with other builds on this machine; skip it when there is nothing to do.
if ! ninja -C "$build" -n "$target" | grep -q 'no work to do'; then
  flock /tmp/ig-build.lock ninja -C "$build" "$target"
fi
bash tests/fuzz/run.sh "$build" 0 "$target"   # the regressions first

mkdir -p "$work/corpus" "$work/findings"
[ -n "$(ls -A "$work/corpus")" ] || cp tests/fuzz/corpus/$target/* "$work/corpus/"
dict=$(grep -A12 '^dict_for()' tests/fuzz/run.sh | grep -E "(^|[ |])$target[ |)]" |
       grep -o 'tests/fuzz/dict/[a-z0-9]*\.dict' || true)
log=$work/fuzz-$(date +%Y%m%d-%H%M%S).log
echo "fuzz: $target for ${secs}s, corpus $work/corpus${dict:+, $dict}, log $log"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=25 -print_final_stats=1
      -artifact_prefix="$work/findings/" ${dict:+-dict="$dict"})
[ "$jobs" -gt 1 ] && args+=(-jobs="$jobs" -workers="$jobs")
rc=0
nice -n "${FUZZ_NICE:-0}" "$build/tests/fuzz/$target" "${args[@]}" "$work/corpus" >"$log" 2>&1 || rc=$?
# The last status line has the totals (with -jobs, each job has its own fuzz-N.log).
[ "$jobs" -gt 1 ] && cat fuzz-*.log >>"$log" 2>/dev/null && rm -f fuzz-*.log
grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 || true
grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log" || true
echo "fuzz: corpus $(ls "$work/corpus" | wc -l) inputs; findings: $(ls "$work/findings" | wc -l)"
if [ "$rc" -ne 0 ]; then
  echo "fuzz: $target FOUND A PROBLEM (exit $rc):"
  grep -E 'ERROR|SUMMARY|invariant' "$log" | head -5
  ls -l "$work/findings"
fi
exit "$rc"
