#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The real-GPU check (run by tests/gpu/device/run.sh on a machine with an NVIDIA GPU).

Starts the workload (gpu_workload) first, reads the libcuda.so.1 it mapped, starts
`infergate run` with the GPU probes on that library (admin port 18002), waits for the probes,
then steps the workload through its phases and after each one reads three figures for the
workload's process:
  - the program's own counts (its JSON line),
  - infergate's per-process device bytes and launch count (/admin/gpu?format=json),
  - nvidia-smi's used_memory (--query-compute-apps=pid,used_memory),
and prints them as a table of deltas from the `ready` phase. Exit status: 0 when infergate's
deltas equal the program's for every phase, 1 when any differs (the table says where), 2 when
the check itself could not run (the workload failed, or infergate never answered). Everything
read is written under --out as well.

Only the standard library: this runs under whatever python3 the GPU machine has.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

MiB = 1024 * 1024


def log(msg):
    print(msg, flush=True)


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode("utf-8", "replace")


def find_proc(view, pid):
    """The workload's entry in infergate's JSON view (schema read tolerantly), or None."""
    for key in ("processes", "procs"):
        for p in view.get(key, []) or []:
            if p.get("tgid", p.get("pid")) == pid:
                return p
    return None


def first_key(d, keys, default=None):
    for k in keys:
        if k in d:
            return d[k]
    return default


class Infergate:
    def __init__(self, binary, config, out_dir, port):
        self.url = "http://127.0.0.1:%d/admin/gpu?format=json" % port
        self.metrics_url = "http://127.0.0.1:%d/metrics" % port
        self.log_path = os.path.join(out_dir, "infergate.log")
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen([binary, "run", "-c", config], stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def view(self):
        return json.loads(http_get(self.url))

    def wait_probes(self, timeout):
        """The probes' report once /admin/gpu answers and says they are active (or the last
        answer at the timeout; None when it never answered)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return last
            try:
                v = self.view()
                last = v
                probes = v.get("probes", {})
                if probes.get("active") and v.get("taken_ns", 1):
                    return v
            except Exception:
                pass
            time.sleep(0.2)
        return last

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def nvidia_smi_used_mib(pid):
    """used_memory (MiB) of pid from nvidia-smi, None when it does not list the process."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20).stdout
    except Exception:
        return None
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            try:
                return int(parts[1])
            except ValueError:
                return None
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--infergate", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int, default=18002)
    ap.add_argument("--interval-ms", type=int, default=200)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    record = {"phases": []}

    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
    wl = subprocess.Popen([args.workload], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, bufsize=1, env=env)

    def wl_line():
        line = wl.stdout.readline()
        if not line:
            raise RuntimeError("the workload ended early (exit status %s)" % wl.wait())
        msg = json.loads(line)
        if "error" in msg:
            raise RuntimeError("the workload failed: %s" % msg["error"])
        return msg

    ig = None
    try:
        ready = wl_line()
        pid, lib = ready["pid"], ready.get("libcuda", "")
        log("workload pid %d, libcuda %s" % (pid, lib or "(not found in /proc/PID/maps)"))
        record["workload_pid"], record["libcuda"] = pid, lib
        lib_real = os.path.realpath(lib) if lib else ""

        config = os.path.join(args.out, "infergate.yaml")
        with open(config, "w") as f:
            f.write("# written by tests/gpu/device/check.py\n"
                    "listeners:\n  - port: %d\n"
                    "admin:\n  port: %d\n"
                    "gpu:\n  enabled: true\n  interval_ms: %d\n%s"
                    "models:\n  - name: echo\n"
                    "    inputs:  [{name: IN,  datatype: FP32, shape: [4]}]\n"
                    "    outputs: [{name: OUT, datatype: FP32, shape: [4]}]\n" %
                    (args.port - 2, args.port, args.interval_ms,
                     ("  library: %s\n" % lib_real) if lib_real else ""))
        ig = Infergate(args.infergate, config, args.out, args.port)
        v = ig.wait_probes(timeout=30)
        if v is None:
            log("infergate did not answer on /admin/gpu within 30 s; its log:")
            with open(ig.log_path) as f:
                log(f.read()[-3000:])
            record["probes"] = None
        else:
            record["probes"] = v.get("probes")
            p = v.get("probes", {})
            log("probes: active=%s library=%s attached=%d missing=%s reason=%s" %
                (p.get("active"), p.get("library"), len(p.get("attached", []) or []),
                 ",".join(p.get("missing", []) or []) or "-", p.get("reason") or "-"))
        settle = max(0.5, 3 * args.interval_ms / 1000.0)

        def sample(phase, prog):
            time.sleep(settle)
            row = {"phase": phase, "program": prog, "smi_mib": nvidia_smi_used_mib(pid)}
            try:
                v = ig.view()
                with open(os.path.join(args.out, "admin-gpu-%s.json" % phase), "w") as f:
                    json.dump(v, f, indent=1)
                row["calls"] = (v.get("stats") or {}).get("calls") or {}
                e = find_proc(v, pid)
                row["ig"] = None if e is None else {
                    "device_bytes": first_key(e, ["device_bytes"], 0),
                    "launches": first_key(e, ["launches_total", "launches"], 0),
                    "graph_launches": first_key(e, ["graph_launches_total", "graph_launches"],
                                                None),
                    "alloc_failures": first_key(e, ["alloc_failures_total"], 0),
                }
            except Exception as ex:
                row["ig"] = None
                row["ig_error"] = str(ex)
            record["phases"].append(row)
            return row

        base = sample("ready", {"device_bytes": 0, "launch_calls": 0, "graph_launches": 0})
        for phase in ["rt", "drv", "async", "graph", "free"]:
            wl.stdin.write("next\n")
            wl.stdin.flush()
            msg = wl_line()
            if msg.get("phase") != phase:
                raise RuntimeError("workload said %r, expected phase %s" % (msg, phase))
            sample(phase, msg)
            if phase == "graph":
                try:
                    once = subprocess.run([args.infergate, "gpu", "--once", "-c", config],
                                          capture_output=True, text=True, timeout=15)
                    with open(os.path.join(args.out, "infergate-gpu-once.txt"), "w") as f:
                        f.write(once.stdout + once.stderr)
                except Exception as ex:
                    log("infergate gpu --once: %s" % ex)
                try:
                    m = http_get(ig.metrics_url)
                    with open(os.path.join(args.out, "metrics-gpu.txt"), "w") as f:
                        f.write("".join(l + "\n" for l in m.splitlines()
                                        if l.startswith("infergate_gpu_") or "gpu" in l[:40]))
                except Exception as ex:
                    log("/metrics: %s" % ex)
        wl.stdin.write("next\n")
        wl.stdin.flush()
        wl_line()
        record["workload_exit"] = wl.wait(timeout=30)

        # The table: deltas from `ready`.
        def ig_val(row, k):
            return None if row.get("ig") is None else row["ig"].get(k)

        b_ig_bytes = ig_val(base, "device_bytes") or 0
        b_ig_launch = ig_val(base, "launches") or 0
        b_smi = base["smi_mib"]
        log("")
        log("%-6s | %12s %12s %12s | %9s %9s | %7s %7s | %s" %
            ("phase", "prog MiB", "infergate", "nvidia-smi", "prog lch", "infergate",
             "prog gr", "ig gr", "verdict"))
        log("-" * 104)
        mismatches = []
        for row in record["phases"][1:]:
            prog = row["program"]
            pb = prog["device_bytes"] / MiB
            ib = ig_val(row, "device_bytes")
            ib = None if ib is None else (ib - b_ig_bytes) / MiB
            sm = None if row["smi_mib"] is None or b_smi is None else row["smi_mib"] - b_smi
            il = ig_val(row, "launches")
            il = None if il is None else il - b_ig_launch
            ig_gr = ig_val(row, "graph_launches")
            ok_bytes = ib is not None and abs(ib - pb) < 1e-9
            ok_launch = il is not None and il == prog["launch_calls"]
            ok_graph = ig_gr is None or ig_gr == prog["graph_launches"]
            verdict = "ok" if ok_bytes and ok_launch and ok_graph else "DIFF(%s)" % ",".join(
                w for w, ok in [("bytes", ok_bytes), ("launches", ok_launch),
                                ("graph", ok_graph)] if not ok)
            if verdict != "ok":
                mismatches.append(row["phase"])
            fmt = lambda x: "-" if x is None else ("%.1f" % x if isinstance(x, float) else str(x))
            log("%-6s | %12s %12s %12s | %9s %9s | %7s %7s | %s" %
                (row["phase"], fmt(pb), fmt(ib), fmt(sm), prog["launch_calls"], fmt(il),
                 prog["graph_launches"], fmt(ig_gr), verdict))
            row["verdict"] = verdict
        # The probes' hits per function (all processes), to tell which route each phase took.
        base_calls = base.get("calls") or {}
        fns = sorted({f for r in record["phases"] for f, n in (r.get("calls") or {}).items()
                      if n != base_calls.get(f, 0)})
        if fns:
            log("")
            log("probe hits per function, cumulative from ready (all processes):")
            log("%-22s %s" % ("function", " ".join("%7s" % r["phase"]
                                                    for r in record["phases"][1:])))
            for f in fns:
                log("%-22s %s" % (f, " ".join("%7d" % ((r.get("calls") or {}).get(f, 0) -
                                                         base_calls.get(f, 0))
                                              for r in record["phases"][1:])))
        log("")
        log("MiB and launches are deltas from the ready phase (infergate: live device bytes and "
            "launches of pid %d; nvidia-smi: used_memory)." % pid)
        record["mismatches"] = mismatches
        if record["probes"] is None:
            log("infergate never answered on /admin/gpu: the check could not run (see its log)")
            return 2
        return 1 if mismatches else 0
    except Exception as ex:
        log("CHECK FAILED TO RUN: %s" % ex)
        record["error"] = str(ex)
        return 2
    finally:
        if wl.poll() is None:
            wl.kill()
            wl.wait()
        if ig:
            ig.stop()
            record["infergate_exit"] = ig.proc.returncode
        with open(os.path.join(args.out, "result.json"), "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
