#!/usr/bin/env bash
# Runs every fuzz target for a bounded time over a scratch copy of its seed corpus, after
# replaying its regression inputs (tests/fuzz/regressions/<target>/), with its dictionary
# (tests/fuzz/dict/). Fails on any crash, sanitizer report, leak, broken invariant or timeout
# (every target is run, then the status says whether one failed); the input that caused it is
# left in $FUZZ_ARTIFACTS (default: a temp dir, printed). See docs/FUZZING.md.
#
#   tests/fuzz/run.sh [build-dir] [seconds per target] [target...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
secs=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
all=(fuzz_xdp_classifier fuzz_ingress_filter fuzz_tcp_stack fuzz_http1 fuzz_http2 fuzz_grpc_framing fuzz_modelinfer
     fuzz_tf_predict fuzz_kserve_json fuzz_kserve_stream fuzz_tfserving_rest fuzz_config
     fuzz_grpc_client fuzz_gpu fuzz_prom_text)
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=("${all[@]}")
  # Every target the build made is fuzzed: one missing from the list above fails the run
  # (fuzz_kserve_stream was built but not fuzzed by CI for a while in issue 16).
  for f in "$build"/tests/fuzz/fuzz_*; do
    n=$(basename "$f")
    [ -x "$f" ] || continue
    [[ " ${all[*]} " == *" $n "* ]] || { echo "fuzz: $n is built but not in run.sh's list of targets"; exit 1; }
  done
fi
artifacts=${FUZZ_ARTIFACTS:-$(mktemp -d /tmp/ig-fuzz-artifacts.XXXXXX)}
mkdir -p "$artifacts"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# The dictionary a target mutates with (libFuzzer -dict=), if any.
dict_for() {
  case $1 in
    fuzz_http1) echo tests/fuzz/dict/http.dict ;;
    fuzz_http2 | fuzz_grpc_framing | fuzz_modelinfer | fuzz_tf_predict | fuzz_grpc_client) echo tests/fuzz/dict/h2.dict ;;
    fuzz_kserve_json | fuzz_kserve_stream | fuzz_tfserving_rest) echo tests/fuzz/dict/json.dict ;;
    fuzz_config) echo tests/fuzz/dict/yaml.dict ;;
    fuzz_prom_text) echo tests/fuzz/dict/prom.dict ;;
  esac
}

status=0
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/$t
  [ -x "$bin" ] || { echo "fuzz: $bin not built (ninja -C $build fuzz)"; exit 1; }
  regress=(tests/fuzz/regressions/$t/*)
  if [ -e "${regress[0]}" ]; then
    echo "fuzz: $t: replaying ${#regress[@]} regression input(s)"
    if ! "$bin" -rss_limit_mb=2048 -timeout=25 "${regress[@]}" >"$artifacts/$t.regress.log" 2>&1; then
      echo "fuzz: $t FAILED on a regression input:"
      tail -40 "$artifacts/$t.regress.log"
      status=1
      continue
    fi
  fi
  [ "$secs" -gt 0 ] || continue
  work=$(mktemp -d /tmp/ig-fuzz-$t.XXXXXX)
  cp tests/fuzz/corpus/$t/* "$work/"
  dict=$(dict_for "$t")
  echo "fuzz: $t for ${secs}s (corpus copy in $work${dict:+, $dict})"
  if "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 \
      ${dict:+-dict="$dict"} -artifact_prefix="$artifacts/$t-" "$work" >"$artifacts/$t.log" 2>&1; then
    grep -E '^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec' \
      "$artifacts/$t.log" || true
    rm -rf "$work"
  else
    echo "fuzz: $t FOUND A PROBLEM (input and log in $artifacts):"
    tail -60 "$artifacts/$t.log"
    ls -l "$artifacts"/$t-* 2>/dev/null || true
    status=1
  fi
done
[ $status -eq 0 ] && echo "fuzz: all targets clean (logs in $artifacts)"
exit $status
