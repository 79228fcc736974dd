#!/usr/bin/env bash
# Builds the CUDA tests (CUDA shared memory's device region incl. a real cudaIpcOpenMemHandle in
# a second process, and cudaHostAlloc pinned memory) and bundles them with the libraries they
# need (not the driver, libcuda.so.1, which the GPU machine provides) into build-gpu-bundle/,
# for the `device` tool:
#
#   scripts/gpu-bundle.sh
#   device run: command "bash build-gpu-bundle/run.sh", carry ["build-gpu-bundle"]
#
# run.sh starts each test through the bundled dynamic loader so that the bundle does not depend
# on the GPU machine's distribution; every test must pass there and none may skip.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-cuda -G Ninja -DINFERGATE_WITH_CUDA=ON -DINFERGATE_WITH_XDP=OFF \
  -DINFERGATE_BUILD_BENCH=OFF -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
tests=(unit_backends_device_region_test unit_backends_pinned_memory_test)
ninja -C build-cuda "${tests[@]}"
out=build-gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${tests[@]}"; do
  cp "build-cuda/tests/$t" "$out/bin/"
  ldd "build-cuda/tests/$t" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libcuda.so*) ;;  # the driver comes from the GPU machine
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
loader=$(ldd "build-cuda/tests/${tests[0]}" | awk '/ld-linux/ {print $1}')
cp -L "$loader" "$out/ld-linux"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled CUDA tests; fails if one fails or skips.
cd "$(dirname "$0")"
nvidia-smi -L || true
rc=0
for t in bin/*; do
  echo "== $t"
  LD_LIBRARY_PATH= ./ld-linux --library-path lib "./$t" --gtest_filter=-CudaIpcChild.* 2>&1 | tee "/tmp/$(basename "$t").log" | tail -40
  if ! grep -q "PASSED" "/tmp/$(basename "$t").log" || grep -q "FAILED\|SKIPPED \]" "/tmp/$(basename "$t").log"; then rc=1; fi
done
echo "bundle rc=$rc"
exit $rc
RUN
chmod +x "$out/run.sh"
du -sh "$out"
