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

cd build
ctest --output-on-failure --timeout 600 -j1
