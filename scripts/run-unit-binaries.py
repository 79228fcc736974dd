#!/usr/bin/python3
"""Runs the tests ctest would select in a build directory (ctest -L LABEL -E REGEX), one
process per test binary with all of its selected cases (--gtest_filter), instead of ctest's
one process per case: the same cases, without a process start per case, which under the
sanitizers costs about 0.2 s each (scripts/test.sh, CI's time budget). Commands that are not
gtest binaries run as ctest would run them. Exits non-zero when any binary fails; a failing
binary's output is printed.

    scripts/run-unit-binaries.py BUILD_DIR [-L LABEL] [-E REGEX] [--timeout SECONDS]
"""
import argparse
import collections
import json
import re
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("-L", dest="label", default="unit")
    ap.add_argument("-E", dest="exclude", default=None)
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args()
    cmd = ["ctest", "-L", a.label, "--show-only=json-v1"]
    if a.exclude:
        cmd += ["-E", a.exclude]
    tests = json.loads(subprocess.run(cmd, cwd=a.build_dir, check=True, capture_output=True,
                                      text=True).stdout)["tests"]
    groups = collections.OrderedDict()  # (binary, cwd) -> [case filters]
    others = []
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if props.get("DISABLED") or "command" not in t:
            continue
        command, cwd = t["command"], props.get("WORKING_DIRECTORY", a.build_dir)
        filt = [x for x in command if x.startswith("--gtest_filter=")]
        if filt:
            groups.setdefault((command[0], cwd), []).append(filt[0][len("--gtest_filter="):])
        else:
            others.append((t["name"], command, cwd))
    failed, cases, start = [], 0, time.time()
    runs = [(b, [b, "--gtest_brief=1", "--gtest_filter=" + ":".join(f)], cwd, len(f))
            for (b, cwd), f in groups.items()] + [(n, c, cwd, 1) for n, c, cwd in others]
    for name, command, cwd, n in runs:
        cases += n
        t0 = time.time()
        try:
            r = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                               timeout=a.timeout)
            ok, out = r.returncode == 0, r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            ok, out = False, "timed out after %d s\n%s" % (a.timeout, e.stdout or "")
        print("%-6s %6.1f s %4d case(s)  %s" % ("ok" if ok else "FAIL", time.time() - t0, n,
                                                 re.sub(r".*/", "", name)), flush=True)
        if not ok:
            failed.append(name)
            sys.stdout.write(out[-20000:])
    print("%d case(s) in %d run(s), %.0f s; %s" % (
        cases, len(runs), time.time() - start,
        "all passed" if not failed else "FAILED: " + ", ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
