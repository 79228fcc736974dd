#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The real-GPU check of the GPU probes (issue 17), for a machine with an NVIDIA GPU, as root:
# builds gpu_workload.cu with nvcc, starts it, starts `infergate run` with gpu.enabled on the
# libcuda.so.1 the workload mapped (admin port 18002), steps the workload through its phases
# and prints infergate's per-process device bytes and launch counts beside nvidia-smi's
# used_memory and the program's own counts (check.py). Under 3 minutes (the nvcc build is most
# of it).
#
#   tests/gpu/device/run.sh INFERGATE_BINARY [OUT_DIR]
#
# INFERGATE_BINARY: an infergate built with the GPU probes. When it sits in a bundle made by
# pack.sh (BUNDLE/bin/infergate with BUNDLE/lib/), that lib/ goes on LD_LIBRARY_PATH, so a
# binary built on another distribution runs. OUT_DIR (default $OUT, else /tmp/ig-gpu-check):
# the log, the config, infergate's JSON at each phase, result.json.
# Exit status: check.py's (0 figures match, 1 a difference, 2 could not run); 3 set-up failed.
#
# A dry run without a GPU, on the stub library (fake_workload.py plays gpu_workload's phases
# through ig-cuda-driver; nvidia-smi's column stays empty):
#   /usr/bin/python3 tests/gpu/device/check.py --infergate build/app/infergate \
#       --workload tests/gpu/device/fake_workload.py --out /tmp/ig-gpu-dry
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: run.sh INFERGATE_BINARY [OUT_DIR]}
out=${2:-${OUT:-/tmp/ig-gpu-check}}
mkdir -p "$out"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
if [ -d "$(dirname "$bin")/../lib" ]; then
	export LD_LIBRARY_PATH="$(cd "$(dirname "$bin")/../lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

echo "== machine"
echo "kernel $(uname -r), uid $(id -u)"
nvidia-smi -L 2>&1 | head -4
nvidia-smi --query-gpu=driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -2
[ -e /sys/kernel/btf/vmlinux ] && echo "BTF: yes" || echo "BTF: no (/sys/kernel/btf/vmlinux missing)"
grep -q ' - cgroup2 ' /proc/self/mountinfo && echo "cgroup v2: yes" || echo "cgroup v2: no"
[ -d /sys/bus/event_source/devices/uprobe ] && echo "uprobe PMU: yes" || echo "uprobe PMU: no (/sys/bus/event_source/devices/uprobe missing: no uprobes)"
if ! ldd "$bin" >/dev/null 2>&1 || ldd "$bin" | grep -q 'not found'; then
	echo "infergate cannot run here (missing libraries):"; ldd "$bin" | grep 'not found'
	exit 3
fi
"$bin" --version 2>&1 | head -1

echo "== the driver's probed entry points"
echo "   (a first instruction the kernel emulates, push/nop/jmp/call, costs one trap per call;"
echo "   any other costs two: docs/BENCHMARKS.md, GPU probes)"
for lib in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 /usr/lib/libcuda.so.1; do
	[ -e "$lib" ] || continue
	echo "$lib -> $(readlink -f "$lib")"
	if command -v objdump >/dev/null; then
		for fn in cuLaunchKernel cuLaunchKernel_ptsz cuMemAlloc_v2 cuStreamSynchronize; do
			objdump -d --no-show-raw-insn "$lib" 2>/dev/null | grep -A2 "<$fn>:" | head -3
		done
	else
		echo "(no objdump here: first bytes not shown)"
	fi
	break
done

echo "== build"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_home=$(dirname "$(dirname "$nvcc")")
arch=${IG_CUDA_ARCH:-sm_90}
work=$(mktemp -d /tmp/ig-gpu-workload.XXXXXX)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
if ! timeout 90 "$nvcc" -O2 -arch="$arch" -o "$work/gpu_workload" "$here/gpu_workload.cu" \
	-L"$cuda_home/lib64/stubs" -L"$cuda_home/targets/x86_64-linux/lib/stubs" -lcuda \
	>"$out/nvcc.log" 2>&1; then
	echo "nvcc failed:"; tail -20 "$out/nvcc.log"
	exit 3
fi
echo "built gpu_workload for $arch in $(( $(date +%s) - t0 )) s"

echo "== check"
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
PYTHONUNBUFFERED=1 timeout 75 "$py" "$here/check.py" --infergate "$bin" \
	--workload "$work/gpu_workload" --out "$out" --port 18002
rc=$?
echo "== infergate log (last 30 lines)"
tail -30 "$out/infergate.log" 2>/dev/null
exit $rc
