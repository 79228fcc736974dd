"""Least privilege (docs/OPERATIONS.md "Privileges"): a real gateway in socket, xdp-filter and
afxdp mode, its /proc/<pid>/task/*/status read while it serves. Every thread must show the
documented sets: socket mode keeps no capability at all; xdp-filter and afxdp keep CAP_NET_ADMIN
in the permitted and bounding sets only (never effective), to detach the XDP program at
shutdown, which must still work. no_new_privs is set and the seccomp filter is on (Seccomp: 2)
in every thread, requests are still answered, and the process exits 0 on SIGTERM.

Also: a gateway switched to an unprivileged user (security.user) serves and stops cleanly, and
one that a local user tried to block by creating its shared-memory names first still starts.
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402
import backend_fixture as bf  # noqa: E402

CAP_NET_ADMIN = 1 << 12
FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid", "Gid")

BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                               "data": list(range(16))}]})

SOCKET_CONFIG = """
mode: socket
reactors: 2
listeners: [{{name: http, address: 127.0.0.1, port: 0, protocol: http}}]
admin: {{address: 127.0.0.1, port: 0}}
{security}models:
""" + harness.braces(harness.IDENTITY_MODEL)

XDP_CONFIG = """
mode: {mode}
reactors: 1
listeners: [{{name: http, address: 0.0.0.0, port: 8000, protocol: http}}]
admin: {{address: 127.0.0.1, port: 8002}}
xdp:
  interface: {ifname}
  attach: native
  pin_path: /sys/fs/bpf/infergate
{security}models:
""" + harness.braces(harness.IDENTITY_MODEL)


def setUpModule():
    bf.set_up_stubs(skip_per_test=True)  # only the shared-memory test needs the gRPC stubs


def tearDownModule():
    bf.tear_down_stubs()


def thread_status(pid):
    """{tid: {field: value}} for every thread of `pid`."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        fields = {}
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k in FIELDS:
                        fields[k] = v.split()[0] if k in ("Uid", "Gid") else v.strip()
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                fields["comm"] = f.read().strip()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        out[int(tid)] = fields
    return out


def read(path):
    with open(path) as f:
        return f.read()


def caps_hex(v):
    return "%016x" % v


class Checks:
    def assert_dropped(self, pid, kept, uid="0"):
        threads = thread_status(pid)
        self.assertGreaterEqual(len(threads), 3, threads)  # main, reactor(s), admin, batcher...
        want = {"CapInh": caps_hex(0), "CapPrm": caps_hex(kept), "CapEff": caps_hex(0),
                "CapBnd": caps_hex(kept), "CapAmb": caps_hex(0), "NoNewPrivs": "1",
                "Seccomp": "2", "Uid": uid}
        for tid, f in threads.items():
            got = {k: f.get(k) for k in want}
            self.assertEqual(got, want, "thread %d (%s)" % (tid, f.get("comm")))
        return threads


@unittest.skipIf(os.geteuid() != 0, "needs root (capabilities to drop)")
class SocketModeTest(unittest.TestCase, Checks):
    def gateway(self, security=""):
        return harness.Gateway(config_text=SOCKET_CONFIG.format(security=security))

    def test_every_thread_drops_everything_and_still_serves(self):
        gw = self.gateway()
        try:
            self.assertIn("privileges dropped", gw.read_log())
            self.assert_dropped(gw.proc.pid, 0)
            status, _, body = harness.http_request(gw.port, "POST", "/v2/models/identity/infer",
                                                   BODY.encode())
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["outputs"][0]["data"], list(range(16)))
            self.assertIn("infergate_requests_total", gw.metrics())
            # Threads started after the drop (the reactors) inherit it: look again after load.
            for _ in range(20):
                harness.http_request(gw.port, "POST", "/v2/models/identity/infer", BODY.encode())
            self.assert_dropped(gw.proc.pid, 0)
            self.assertNotIn("seccomp refused", gw.read_log())
        finally:
            rc = gw.stop()
        self.assertEqual(rc, 0, gw.read_log())

    def test_without_the_drop_the_sets_are_full(self):
        # The assertions above can fail: with the feature off the same gateway keeps root's sets.
        gw = self.gateway("security: {drop_privileges: false, seccomp: false}\n")
        try:
            threads = thread_status(gw.proc.pid)
            self.assertTrue(all(f["CapEff"] != caps_hex(0) and f["Seccomp"] == "0"
                                for f in threads.values()), threads)
        finally:
            self.assertEqual(gw.stop(), 0)

    def test_runs_as_an_unprivileged_user(self):
        gw = self.gateway("security: {user: \"65534\", group: \"65534\"}\n")
        try:
            self.assert_dropped(gw.proc.pid, 0, uid="65534")
            self.assertTrue(all(f["Gid"] == "65534" for f in thread_status(gw.proc.pid).values()))
            status, _, _ = harness.http_request(gw.port, "POST", "/v2/models/identity/infer",
                                                BODY.encode())
            self.assertEqual(status, 200)
        finally:
            rc = gw.stop()
        self.assertEqual(rc, 0, gw.read_log())

    def test_predictable_shared_memory_names_cannot_block_start_up(self):
        # infergate used to name its Triton shared memory "/infergate.<pid>.<model>.<n>": a
        # local user who created those names first made start-up fail ("File exists"). The
        # wrapper creates them for the pid the gateway will have (exec keeps it).
        if bf.MISSING:
            self.skipTest(bf.MISSING)
        server = bf.TestServer()
        tmp = tempfile.mkdtemp(prefix="ig-squat-")
        wrapper = os.path.join(tmp, "squat.sh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    "for n in remote.0 remote.buf0.in0; do\n"
                    "  : > /dev/shm/infergate.$$.$n; chmod 644 /dev/shm/infergate.$$.$n\n"
                    "  echo /dev/shm/infergate.$$.$n >> %s/squatted\n"
                    "done\n"
                    "exec '%s' \"$@\"\n" % (tmp, os.path.abspath(harness.ARGS.binary)))
        os.chmod(wrapper, 0o755)
        binary, harness.ARGS.binary = harness.ARGS.binary, wrapper
        gw = None
        try:
            gw = bf.start_gateway(bf.model_yaml(endpoints=[server.address],
                                                extra="      shared_memory: system"))
            squatted = read(os.path.join(tmp, "squatted")).split()
            self.assertEqual(len(squatted), 2)
            st, body = bf.infer(gw.port, "remote", [1.0] * 16)
            self.assertEqual(st, 200, body)
            self.assertEqual(server.control("Stats")["raw_input_bytes"], 0)  # through shm
        finally:
            harness.ARGS.binary = binary
            if gw is not None:
                self.assertEqual(gw.stop(), 0)
            server.kill()
            listed = os.path.join(tmp, "squatted")
            for name in read(listed).split() if os.path.exists(listed) else []:
                if os.path.exists(name):
                    os.unlink(name)
            shutil.rmtree(tmp, ignore_errors=True)


class XdpModesTest(netns.VethTestCase, Checks):
    tmp_prefix = "ig-priv-"

    def gateway(self, mode, security=""):
        net = self.net
        text = XDP_CONFIG.format(mode=mode, ifname=net.gw_if, security=security)
        return netns.start_gateway(net, text)

    def check_mode(self, mode, security="", uid="0"):
        net = self.net
        p, log = self.gateway(mode, security)
        try:
            self.assertIn("privileges dropped", read(log))
            self.assertIn("xdp", net.run_gw(["ip", "link", "show", net.gw_if]).stdout)
            # p is infergate itself: `ip netns exec` and the bind-mount shell exec it.
            self.assert_dropped(p.pid, CAP_NET_ADMIN, uid=uid)
            r = net.run_client(["curl", "-sS", "--max-time", "5", "-d", BODY,
                                "http://%s:8000/v2/models/identity/infer" % net.gw_ip])
            self.assertEqual(json.loads(r.stdout)["outputs"][0]["data"], list(range(16)))
            # /metrics reads the program's counters through the map fds (no capability).
            text = net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout
            self.assertIn("infergate_xdp_packets_total", text)
            self.assert_dropped(p.pid, CAP_NET_ADMIN, uid=uid)
            self.assertNotIn("seccomp refused", read(log))
        finally:
            p.terminate()
            p.wait(timeout=20)
        text = read(log)
        self.assertEqual(p.returncode, 0, text)
        # The kept CAP_NET_ADMIN detached the program; nothing was refused on the way out.
        self.assertIn("detached", text)
        self.assertNotIn("xdp", net.run_gw(["ip", "link", "show", net.gw_if]).stdout)
        self.assertNotIn("seccomp refused", text)
        self.assertNotIn("warn", text.split("received SIGTERM")[-1], text)

    def test_xdp_filter_keeps_only_net_admin_permitted(self):
        self.check_mode("xdp-filter")

    def test_afxdp_keeps_only_net_admin_permitted(self):
        self.check_mode("afxdp")

    def test_afxdp_as_an_unprivileged_user(self):
        self.check_mode("afxdp", "security: {user: \"65534\", group: \"65534\"}\n", uid="65534")


if __name__ == "__main__":
    harness.main()
