#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test (unit, BPF,
# integration) with ctest. Run as root (BPF and network-namespace tests need it; they skip
# with a message otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"

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

(cd build && ctest --output-on-failure --timeout 600 -j1)

# Fuzzing (docs/FUZZING.md): the XDP classifier and the TCP stack under libFuzzer with ASan and
# UBSan, in their own clang build directory (only the two fuzz targets are built), each for
# INFERGATE_FUZZ_SECONDS (default 60) after replaying tests/fuzz/regressions/. Any crash,
# sanitizer report or broken invariant fails the run and leaves the input to reproduce it.
if command -v clang++ >/dev/null; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DINFERGATE_FUZZ=ON -DINFERGATE_BUILD_TESTS=OFF -DINFERGATE_BUILD_BENCH=OFF \
    -DINFERGATE_WITH_XDP=OFF >/dev/null
  ninja -C build-fuzz fuzz_xdp_classifier fuzz_tcp_stack
  bash tests/fuzz/run.sh build-fuzz "${INFERGATE_FUZZ_SECONDS:-60}"
else
  echo "fuzz: skipped: clang++ not installed (scripts/install-deps.sh installs it)"
fi
