#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Self-test of the GPU probe test harness: ig-cuda-driver against the stub libcuda.so.1 and the
minimal stub (tests/gpu/CMakeLists.txt registers it as ctest gpu.stub_driver_selftest).

Checks the protocol (one reply per line, garbage and over-long lines included), the ids and the
fake pointers, the injected allocation failure, the stub's call counters, the sync delay, the
missing functions of the minimal stub, children (one in a fresh cgroup v2 directory when root
with cgroup v2; otherwise that part is skipped with a printed reason), and that quitting with a
child alive ends the child.

    selftest.py --driver build/tests/gpu/ig-cuda-driver --stub .../stub/libcuda.so.1 \
                --minimal .../stub-minimal/libcuda.so.1
"""
import argparse
import os
import select
import signal
import subprocess
import sys
import time

REPLY_TIMEOUT_S = 10.0
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


class Driver:
    """ig-cuda-driver in lock step: send() one line, get one reply line back."""

    def __init__(self, driver, lib):
        self.proc = subprocess.Popen([driver, "--lib", lib], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)
        self.buf = b""
        self.ready = self.read_line()

    def read_line(self, timeout=REPLY_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no reply within %.0f s (have %r)" % (timeout, self.buf))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError("driver closed its output (have %r, rc %s)" %
                                     (self.buf, self.proc.poll()))
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def cmd(self, line):
        self.send_raw(line.encode() + b"\n")
        return self.read_line()

    def ok(self, line):
        """The reply's fields after `ok`; fails unless the reply starts with ok."""
        reply = self.cmd(line)
        check(reply == "ok" or reply.startswith("ok "), "%r -> %r, want ok" % (line, reply))
        return reply.split()[1:]

    def quit(self):
        self.send_raw(b"quit\n")
        rc = self.proc.wait(timeout=REPLY_TIMEOUT_S)
        check(rc == 0, "quit: exit status %d" % rc)
        rest = self.proc.stdout.read()
        check(self.buf + rest == b"", "quit: no reply expected, got %r" % (self.buf + rest))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def calls(d, fn):
    return int(d.ok("calls " + fn)[0])


def test_protocol(d):
    pid = d.proc.pid
    check(d.ready == "ready %d" % pid, "first line %r, want 'ready %d'" % (d.ready, pid))
    check(d.ok("pid") == [str(pid)], "pid")
    for bad, want in [("bogus", "err unknown command 'bogus'"), ("", "err empty command"),
                      ("   ", "err empty command"), ("alloc", "err usage:"),
                      ("alloc device", "err usage:"), ("alloc device -5", "err usage:"),
                      ("alloc device 12x", "err usage:"), ("alloc gpu 10", "err unknown"),
                      ("alloc device 10 ptsz", "err ptsz applies"),
                      ("free", "err usage:"), ("free x", "err usage:"),
                      ("free 7", "err no live allocation 7"), ("free 99999999", "err usage:"),
                      ("launch", "err usage:"), ("launch -1", "err usage:"),
                      ("launch 1 2", "err usage:"), ("launch 999999999999", "err usage:"),
                      ("sync", "err usage:"), ("sync gpu", "err unknown sync kind"),
                      ("sync ctx ptsz", "err ptsz applies"), ("delay", "err usage:"),
                      ("sleep 1 2", "err usage:"), ("calls cuNothing", "err unknown function"),
                      ("child", "err usage:"), ("child - x 1", "err usage:"),
                      ("child-exit", "err no such child"), ("child-exit 1", "err no such child"),
                      ("a b c d e f g h i j", "err too many arguments"),
                      ("fail-next now", "err usage:")]:
        reply = d.cmd(bad)
        check(reply.startswith(want), "%r -> %r, want %r..." % (bad, reply, want))
    # An over-long line is one reply, and the next command is answered in step.
    d.send_raw(b"x" * 10000 + b"\n")
    check(d.read_line() == "err line too long", "long line")
    d.send_raw(b"pid\r\n")  # CR tolerated
    check(d.read_line() == "ok %d" % pid, "pid after the long line")


def test_allocations(d):
    ptrs = []
    base = {fn: calls(d, fn) for fn in ["cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync",
                                         "cuMemAllocAsync_ptsz", "cuMemFreeAsync",
                                         "cuMemFreeAsync_ptsz", "cuMemAllocManaged",
                                         "cuMemCreate", "cuMemRelease", "cuMemHostAlloc",
                                         "cuMemFreeHost"]}
    ids = []
    for kind, size in [("device", 1000), ("async", 1), ("async", 300), ("managed", 4096),
                       ("device", 1 << 30)]:
        line = "alloc %s %d%s" % (kind, size, " ptsz" if size == 300 else "")
        i, p = d.ok(line)
        ids.append(int(i))
        ptrs.append((int(p, 16), size))
    check(ids == [0, 1, 2, 3, 4], "ids %r, want 0..4" % ids)
    for p, size in ptrs:
        check(p % 256 == 0 and p >= 0x700000000000, "pointer %#x: 256-aligned, >= 0x7000..." % p)
    # Distinct and not overlapping: each allocation's range ends before the next begins.
    spans = sorted(ptrs)
    for (p, size), (q, _) in zip(spans, spans[1:]):
        check(p + size <= q, "allocations %#x+%d and %#x overlap" % (p, size, q))
    i_vmm, h1 = d.ok("alloc vmm 2097152")
    _, h2 = d.ok("alloc vmm 2097152")
    check(int(h1, 16) != 0 and int(h2, 16) == int(h1, 16) + 1, "vmm handles %s %s" % (h1, h2))
    i_host, hp = d.ok("alloc host 4096")
    check(int(hp, 16) != 0, "host pointer")
    check((int(i_vmm), int(i_host)) == (5, 7), "ids continue: %s %s" % (i_vmm, i_host))
    # Frees use the kind's own call; a freed id is gone, then reused.
    for i in range(8):
        check(d.ok("free %d" % i) == [], "free %d" % i)
    check(d.cmd("free 3").startswith("err no live allocation 3"), "double free")
    want = {"cuMemAlloc_v2": 2, "cuMemFree_v2": 3, "cuMemAllocAsync": 1,
            "cuMemAllocAsync_ptsz": 1, "cuMemFreeAsync": 1, "cuMemFreeAsync_ptsz": 1,
            "cuMemAllocManaged": 1, "cuMemCreate": 2, "cuMemRelease": 2, "cuMemHostAlloc": 1,
            "cuMemFreeHost": 1}
    for fn, n in want.items():
        got = calls(d, fn) - base[fn]
        check(got == n, "%s called %d times, want %d" % (fn, got, n))
    check(d.ok("alloc device 16")[0] == "0", "id 0 reused")
    # fail-next: exactly the next allocation (of any kind) fails with 2, out-pointer unused.
    for kind in ["device", "async", "managed", "vmm", "host"]:
        d.ok("fail-next")
        reply = d.cmd("alloc %s 4096" % kind)
        check(reply == "fail 2", "fail-next then alloc %s -> %r, want 'fail 2'" % (kind, reply))
        i, p = d.ok("alloc %s 4096" % kind)
        check(i == "1", "after the failure, alloc %s gets id 1 (got %s)" % (kind, i))
        d.ok("free 1")
    d.ok("free 0")


def test_launches_and_syncs(d):
    fns = ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
           "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuStreamSynchronize",
           "cuStreamSynchronize_ptsz", "cuCtxSynchronize", "cuEventSynchronize"]
    base = {fn: calls(d, fn) for fn in fns}
    for line in ["launch 1000", "launch 7 ptsz", "launchex 5", "launchex 2 ptsz", "graph 3",
                 "graph 4 ptsz", "launch 0", "sync stream", "sync stream", "sync stream ptsz",
                 "sync ctx", "sync event"]:
        d.ok(line)
    want = dict(zip(fns, [1000, 7, 5, 2, 3, 4, 2, 1, 1, 1]))
    for fn in fns:
        got = calls(d, fn) - base[fn]
        check(got == want[fn], "%s called %d times, want %d" % (fn, got, want[fn]))
    # The sync delay: every sync call takes at least the delay; 0 turns it off.
    delay_ns = 60_000_000
    d.ok("delay %d" % delay_ns)
    for kind in ["ctx", "stream", "event", "stream ptsz"]:
        t0 = time.monotonic_ns()
        d.ok("sync " + kind)
        took = time.monotonic_ns() - t0
        check(took >= delay_ns, "sync %s took %d ns with delay %d ns" % (kind, took, delay_ns))
    d.ok("delay 0")
    t0 = time.monotonic_ns()
    d.ok("sync ctx")
    took = time.monotonic_ns() - t0
    check(took < 2_000_000_000, "sync ctx took %d ns with no delay" % took)
    t0 = time.monotonic_ns()
    d.ok("sleep 30")
    check(time.monotonic_ns() - t0 >= 30_000_000, "sleep 30 took under 30 ms")


def proc_state(pid):
    """'gone', or the State letter of /proc/PID/status."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split()[1]
    except FileNotFoundError:
        return "gone"
    return "?"


def wait_gone(pid, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_state(pid) in ("gone", "Z"):
            return True
        time.sleep(0.02)
    return False


def cgroup2_mount():
    """(mount point, root inside the hierarchy) of the cgroup v2 mount, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return fields[4], fields[3]
    return None


def test_children(d):
    launches0 = calls(d, "cuLaunchKernel")
    # A child in our own cgroup: its calls are its own process's (the parent's counters stay).
    a = int(d.ok("child - 8192 5")[0])
    b = int(d.ok("child - 512 1")[0])
    check(a != b and a != d.proc.pid and proc_state(a) not in ("gone", "Z"), "children alive")
    check(calls(d, "cuLaunchKernel") == launches0, "the child's launches are not the parent's")
    check(d.ok("child-exit %d" % a) == [], "child-exit by pid")
    check(wait_gone(a, 0.5), "child %d ended" % a)
    check(d.cmd("child-exit %d" % a) == "err no such child", "child-exit twice")
    check(d.ok("child-exit") == [], "child-exit newest")
    check(wait_gone(b, 0.5), "child %d ended" % b)
    # A child that cannot join its cgroup reports why, and is reaped.
    reply = d.cmd("child /nonexistent/cg 4096 1")
    check(reply.startswith("err child: cannot join /nonexistent/cg/cgroup.procs"),
          "bad cgroup -> %r" % reply)
    d.ok("fail-next")
    reply = d.cmd("child - 4096 1")
    check(reply == "err child: cuMemAlloc_v2 returned 2", "child alloc failure -> %r" % reply)
    # The flag was copied by fork(): the driver's own next allocation fails as well.
    check(d.cmd("alloc device 1") == "fail 2", "fail-next stays set in the parent after a child")

    if os.geteuid() != 0:
        print("SKIP child in a cgroup: not root (needs to create a cgroup v2 directory)")
        return
    m = cgroup2_mount()
    if m is None:
        print("SKIP child in a cgroup: no cgroup v2 mount in /proc/self/mountinfo")
        return
    mnt, root = m
    name = "ig-stub-selftest-%d-%d" % (os.getpid(), time.monotonic_ns() % 1000000)
    cg = os.path.join(mnt, name)
    try:
        os.mkdir(cg)
    except OSError as e:
        print("SKIP child in a cgroup: cannot create %s: %s" % (cg, e))
        return
    try:
        c = int(d.ok("child %s 65536 3" % cg)[0])
        with open(os.path.join(cg, "cgroup.procs")) as f:
            procs = [int(x) for x in f.read().split()]
        check(procs == [c], "%s/cgroup.procs = %r, want [%d]" % (cg, procs, c))
        with open("/proc/%d/cgroup" % c) as f:
            v2 = [l.strip() for l in f if l.startswith("0::")]
        want = "0::" + os.path.join(root if root != "/" else "/", name)
        check(v2 == [want], "/proc/%d/cgroup has %r, want %r" % (c, v2, want))
        with open("/proc/%d/cgroup" % d.proc.pid) as f:
            parent_v2 = [l.strip() for l in f if l.startswith("0::")]
        check(parent_v2 != v2, "the driver itself stayed in its own cgroup")
        check(d.ok("child-exit") == [], "child-exit (cgroup child)")
        print("ok child in cgroup %s (pid %d)" % (cg, c))
    finally:
        for _ in range(50):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.02)
        else:
            print("WARNING: could not remove %s" % cg)
    check(not os.path.exists(cg), "cgroup %s removed" % cg)


def test_quit_with_child(driver, lib):
    d = Driver(driver, lib)
    try:
        c = int(d.ok("child - 4096 1")[0])
        d.ok("alloc device 4096")
        d.quit()
        check(wait_gone(c), "a child ends when the driver quits (pid %d: %s)" % (c, proc_state(c)))
    finally:
        d.kill()
    # End of input is a quit as well.
    d = Driver(driver, lib)
    try:
        d.proc.stdin.close()
        check(d.proc.wait(timeout=REPLY_TIMEOUT_S) == 0, "EOF: exit 0")
    finally:
        d.kill()


def test_minimal(driver, lib):
    d = Driver(driver, lib)
    try:
        check(d.ready == "ready %d" % d.proc.pid, "minimal: ready")
        for line, want in [("launchex 1", "err missing cuLaunchKernelEx"),
                           ("launchex 1 ptsz", "err missing cuLaunchKernelEx_ptsz"),
                           ("alloc vmm 4096", "err missing cuMemCreate"),
                           ("calls cuLaunchKernelEx", "ok 0")]:
            reply = d.cmd(line)
            check(reply == want, "minimal: %r -> %r, want %r" % (line, reply, want))
        d.ok("launch 2")
        d.ok("graph 1")
        i, p = d.ok("alloc device 100")
        check(i == "0" and int(p, 16) == 0x700000000000, "minimal: first pointer %s" % p)
        d.quit()
    finally:
        d.kill()


def test_bad_library(driver):
    p = subprocess.run([driver, "--lib", "/nonexistent/libcuda.so.1"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=REPLY_TIMEOUT_S)
    check(p.returncode == 1 and p.stdout.startswith("err dlopen /nonexistent/libcuda.so.1"),
          "bad --lib: rc %d, %r" % (p.returncode, p.stdout))
    p = subprocess.run([driver, "--bogus"], capture_output=True, text=True,
                       timeout=REPLY_TIMEOUT_S)
    check(p.returncode == 2, "unknown argument: rc %d" % p.returncode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--stub", required=True)
    ap.add_argument("--minimal", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    d = None
    try:
        d = Driver(args.driver, args.stub)
        test_protocol(d)
        test_allocations(d)
        test_launches_and_syncs(d)
        test_children(d)
        d.quit()
        test_quit_with_child(args.driver, args.stub)
        test_minimal(args.driver, args.minimal)
        test_bad_library(args.driver)
    except AssertionError as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        if d:
            d.kill()
    print("PASS: %d checks" % checks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
