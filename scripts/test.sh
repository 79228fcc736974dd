#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test (unit, BPF,
# integration) with ctest. Run as root (BPF and network-namespace tests need it; they skip
# with a message otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
# With the optional DPDK data plane (docs/DPDK.md): its device, mode and tests are built and
# run too (the default build, scripts/build.sh alone, leaves it off).
# Debug information: -g1 (line tables and function names: enough for backtraces and perf)
# instead of RelWithDebInfo's -g, which takes about 40 % longer to compile (CI's time budget,
# docs/OPERATIONS.md). A plain scripts/build.sh keeps -g.
ci_flags="-O2 -g1 -DNDEBUG"
bash scripts/build.sh -DINFERGATE_WITH_DPDK=ON -DCMAKE_C_FLAGS_RELWITHDEBINFO="$ci_flags" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$ci_flags" "$@"

# The CUDA build is optional; where the toolkit is installed, prove it still builds (the whole
# backends library, with the cudart paths of pinned memory and CUDA shared memory) and run the
# pinned-memory and device-region tests against it (their GPU cases skip, with the CUDA error,
# without a GPU).
if [ -d /usr/local/cuda/include ]; then
  cmake -S . -B build-cuda -G Ninja -DINFERGATE_WITH_CUDA=ON -DINFERGATE_WITH_XDP=OFF \
    -DINFERGATE_BUILD_BENCH=OFF -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
  ninja -C build-cuda unit_backends_pinned_memory_test unit_backends_device_region_test
  ./build-cuda/tests/unit_backends_pinned_memory_test --gtest_brief=1
  ./build-cuda/tests/unit_backends_device_region_test --gtest_brief=1
fi

# Everything but the unit tests through ctest (one process per case); the unit tests one process
# per binary (scripts/run-unit-binaries.py: the same cases, without a process start per case).
(cd build && ctest --output-on-failure --timeout 600 -j1 -LE '^unit$')
/usr/bin/python3 scripts/run-unit-binaries.py build -L '^unit$'

# Sanitizers and fuzzing (docs/FUZZING.md), in one clang build directory, build-fuzz, where
# everything is compiled with ASan + UBSan (every report fatal) and libFuzzer's coverage:
#  - the unit tests (label unit: not the BPF or integration tests) run under the sanitizers,
#    one process per binary (scripts/run-unit-binaries.py);
#  - every fuzz target replays tests/fuzz/regressions/, then fuzzes its seed corpus for
#    INFERGATE_FUZZ_SECONDS (default 8 s per target, 15 targets, plus their regression
#    replays: docs/FUZZING.md has the CI time budget).
# Any sanitizer report, crash, leak or broken invariant fails the run; a fuzz finding leaves the
# input to reproduce it in the artifacts directory run.sh prints.
if command -v clang++ >/dev/null; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DINFERGATE_FUZZ=ON -DINFERGATE_BUILD_TESTS=ON -DINFERGATE_BUILD_BENCH=OFF \
    -DINFERGATE_WITH_XDP=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" >/dev/null
  mapfile -t sanitized_units < <(ninja -C build-fuzz -t targets all | grep -o '^unit_[a-z0-9_]*' | sort -u)
  # ig_cuda_driver: the GPU stub driver and its selftest (gpu.stub_driver_selftest, label unit).
  ninja -C build-fuzz fuzz ig_cuda_driver "${sanitized_units[@]}"
  # Not there: the tests that install the seccomp filter in a child (app/privileges). The filter
  # allows the gateway's system calls only, and the sanitizer runtimes make others on every new
  # thread (sigaltstack, sched_getaffinity, open of /proc/self/maps): they run in build/ above.
  UBSAN_OPTIONS=print_stacktrace=1 /usr/bin/python3 scripts/run-unit-binaries.py build-fuzz \
    -L '^unit$' -E '^(SeccompFilter\.|DropPrivileges\.EveryThreadEndsWithNothingButWhatIsKept$)'
  bash tests/fuzz/run.sh build-fuzz "${INFERGATE_FUZZ_SECONDS:-8}"
else
  echo "fuzz and sanitized unit tests: skipped: clang++ not installed (scripts/install-deps.sh installs it)"
fi
