#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gpu_workload's phases and JSON lines, played on the stub libcuda.so.1 through ig-cuda-driver,
for a dry run of check.py on a machine without a GPU (see run.sh). The reported pid is the
driver's (the process that makes the calls).

    fake_workload.py [--driver build/tests/gpu/ig-cuda-driver] [--lib .../stub/libcuda.so.1]
"""
import argparse
import json
import os
import subprocess
import sys

MiB = 1024 * 1024
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", default=os.path.join(ROOT, "build/tests/gpu/ig-cuda-driver"))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build/tests/gpu/stub/libcuda.so.1"))
    args = ap.parse_args()
    d = subprocess.Popen([args.driver, "--lib", args.lib], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    ready = d.stdout.readline().split()
    if len(ready) != 2 or ready[0] != "ready":
        print(json.dumps({"error": "driver: %r" % ready}), flush=True)
        return 2
    pid = int(ready[1])
    counts = {"device_bytes": 0, "launch_calls": 0, "graph_launches": 0, "alloc_calls": 0,
              "free_calls": 0}

    def cmd(line):
        d.stdin.write(line + "\n")
        d.stdin.flush()
        reply = d.stdout.readline().strip()
        if not reply.startswith("ok"):
            print(json.dumps({"error": "driver: %s -> %s" % (line, reply)}), flush=True)
            sys.exit(2)
        return reply.split()[1:]

    def alloc(kind, mib):
        counts["device_bytes"] += mib * MiB
        counts["alloc_calls"] += 1
        return cmd("alloc %s %d" % (kind, mib * MiB))[0]

    def report(phase, **extra):
        print(json.dumps(dict(phase=phase, pid=pid, **counts, **extra)), flush=True)
        return sys.stdin.readline()

    report("ready", libcuda=os.path.realpath(args.lib))
    ids = {}
    for mib in (64, 32, 16):
        ids["rt%d" % mib] = alloc("device", mib)
    cmd("launch 1000")
    counts["launch_calls"] += 1000
    cmd("sync ctx")
    report("rt")
    for mib in (48, 8):
        ids["drv%d" % mib] = alloc("device", mib)
    cmd("launch 500")
    counts["launch_calls"] += 500
    cmd("sync stream")
    cmd("sync ctx")
    report("drv")
    ids["async"] = alloc("async", 16)
    cmd("sync stream")
    report("async")
    cmd("launch 10")
    counts["launch_calls"] += 10
    cmd("graph 20")
    counts["graph_launches"] += 20
    cmd("sync stream")
    report("graph")
    for k, mib in (("rt32", 32), ("drv8", 8), ("async", 16)):
        cmd("free " + ids.pop(k))
        counts["device_bytes"] -= mib * MiB
        counts["free_calls"] += 1
    cmd("sync stream")
    report("free")
    for i in ids.values():
        cmd("free " + i)
        counts["free_calls"] += 1
    counts["device_bytes"] = 0
    d.stdin.write("quit\n")
    d.stdin.flush()
    d.wait()
    print(json.dumps(dict(phase="exit", pid=pid, **counts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
