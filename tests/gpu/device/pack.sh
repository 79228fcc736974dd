#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Bundles an infergate binary with the shared libraries it needs beyond glibc and the C++
# runtime, for the GPU machine (another distribution, nothing installable there):
#
#   tests/gpu/device/pack.sh build/app/infergate build/gpu-check
#   -> build/gpu-check/bin/infergate (stripped), build/gpu-check/lib/*.so.*  (about 12 MiB)
#
# Then, with the device tool: carry ["build/gpu-check"] and run
#   tests/gpu/device/run.sh build/gpu-check/bin/infergate "$OUT"
set -euo pipefail
bin=${1:?usage: pack.sh INFERGATE_BINARY OUT_DIR}
dst=${2:?usage: pack.sh INFERGATE_BINARY OUT_DIR}
rm -rf "$dst"
mkdir -p "$dst/bin" "$dst/lib"
strip -o "$dst/bin/infergate" "$bin"
ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
	case "$(basename "$lib")" in
	libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
	*) cp -L "$lib" "$dst/lib/" ;;
	esac
done
du -sh "$dst"
