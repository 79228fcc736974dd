#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test (unit, BPF,
# integration) with ctest. Run as root (BPF and network-namespace tests need it; they skip
# with a message otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
cd build
ctest --output-on-failure --timeout 600 -j1
