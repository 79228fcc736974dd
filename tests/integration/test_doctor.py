"""`infergate doctor` and the start-up host probe (docs/HOSTS.md): every feature is reported
with what its probe saw; on a veth pair the interface probes find what veth gives (native XDP,
AF_XDP copy mode with need_wakeup, no zero-copy); a config's mode is judged; and a running
gateway exports infergate_host_feature{feature}."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

FEATURES = ["bpf", "xdp_adjust_meta", "xdp_adjust_head", "xdp_adjust_tail", "xskmap",
            "syncookie_helpers", "uprobe", "bpf_lsm", "fentry", "cuda_prologues"]
IFACE_FEATURES = ["xdp_native", "xdp_generic", "xsk_copy", "xsk_zero_copy", "xsk_need_wakeup",
                  "xsk_multi_buffer", "xsk_busy_poll"]


def doctor(*args, cmd=None):
    full = (cmd or (lambda c: c))([harness.ARGS.binary, "doctor"] + list(args))
    return subprocess.run(full, capture_output=True, text=True, timeout=60)


def support(out, name):
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == name and parts[1] in ("yes", "no", "unknown"):
            return parts[1]
    return None


class DoctorTest(unittest.TestCase):
    def test_kernel_wide_report(self):
        r = doctor()
        self.assertEqual(r.returncode, 0, r.stderr)
        for f in FEATURES:
            self.assertIsNotNone(support(r.stdout, f), f + " missing:\n" + r.stdout)
        self.assertRegex(r.stdout, r"socket\s+will work")
        if os.geteuid() == 0:
            self.assertEqual(support(r.stdout, "bpf"), "yes", r.stdout)
            self.assertEqual(support(r.stdout, "xdp_adjust_head"), "yes", r.stdout)
            # afxdp works with either tag placement; the doctor names the one it will use.
            self.assertRegex(r.stdout, r"afxdp\s+will work\s+tags (in XDP metadata|as a 16-byte frame prefix)")
            # A missing feature comes with what infergate does and the fix.
            for f in FEATURES:
                if support(r.stdout, f) == "no":
                    block = r.stdout.split("\n  " + f, 1)[1].split("\n  ", 3)
                    self.assertIn("without it:", block[1], f)
                    self.assertIn("fix:", block[2], f)

    def test_veth_interface_and_config(self):
        why = netns.have_root_and_netns()
        if why:
            self.skipTest(why)
        with netns.VethPair() as net:
            r = doctor("--interface", net.gw_if, cmd=net.gw_cmd)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("interface %s (veth)" % net.gw_if, r.stdout)
            for f in IFACE_FEATURES:
                self.assertIsNotNone(support(r.stdout, f), f + " missing:\n" + r.stdout)
            self.assertEqual(support(r.stdout, "xdp_native"), "yes", r.stdout)
            self.assertEqual(support(r.stdout, "xdp_generic"), "yes", r.stdout)
            self.assertEqual(support(r.stdout, "xsk_copy"), "yes", r.stdout)
            self.assertEqual(support(r.stdout, "xsk_need_wakeup"), "yes", r.stdout)
            self.assertEqual(support(r.stdout, "xsk_zero_copy"), "no", r.stdout)
            self.assertRegex(r.stdout, r"afxdp\s+will work\s+copy mode")
            # The probe left nothing attached.
            link = net.run_gw(["ip", "link", "show", net.gw_if]).stdout
            self.assertNotIn("xdp", link)
            # A config naming afxdp on this interface: judged, exit 0.
            with open(os.path.join(harness.ARGS.source, "config", "examples", "xdp-filter.yaml")) as ex:
                text = ex.read()
            text = text.replace("mode: xdp-filter", "mode: afxdp", 1)
            text = re.sub(r"(\n\s+interface:\s*)\S+", r"\g<1>" + net.gw_if, text, count=1)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(text)
            try:
                r = doctor("-c", f.name, cmd=net.gw_cmd)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("mode afxdp will work on this host", r.stdout)
            finally:
                os.unlink(f.name)
            # An interface that does not exist: said so.
            r = doctor("--interface", "nosuchif0", cmd=net.gw_cmd)
            self.assertIn("no interface named 'nosuchif0'", r.stdout)

    def test_cuda_prologues_of_the_stub_drivers(self):
        # The stub driver the GPU tests use, built two ways (tests/gpu): by default its entry
        # points start with `mov $imm,%edi` (single-stepped), with frame pointers `push %rbp`.
        build = os.path.dirname(os.path.dirname(os.path.abspath(harness.ARGS.binary)))
        plain = os.path.join(build, "tests", "gpu", "stub", "libcuda.so.1")
        fp = os.path.join(build, "tests", "gpu", "stub-fp", "libcuda.so.1")
        if not (os.path.exists(plain) and os.path.exists(fp)):
            self.skipTest("the stub CUDA drivers are not built (ninja ig_cuda_driver)")
        r = doctor("--cuda-library", fp)
        self.assertEqual(support(r.stdout, "cuda_prologues"), "yes", r.stdout)
        self.assertIn("start with an emulated instruction", r.stdout)
        r = doctor("--cuda-library", plain)
        self.assertEqual(support(r.stdout, "cuda_prologues"), "no", r.stdout)
        self.assertRegex(r.stdout, r"cuda_prologues .*single-stepped \(two traps\): .*cuLaunchKernel")
        r = doctor("--cuda-library", "/nonexistent/libcuda.so.1")
        self.assertEqual(support(r.stdout, "cuda_prologues"), "unknown", r.stdout)

    def test_running_gateway_exports_features(self):
        gw = harness.Gateway()
        try:
            text = gw.metrics()
            self.assertIn("# TYPE infergate_host_feature gauge", text)
            if os.geteuid() == 0:
                self.assertEqual(harness.parse_metric(text, "infergate_host_feature", feature="bpf"), 1)
            self.assertRegex(gw.read_log(), r"host: kernel \S+; yes: ")
        finally:
            gw.stop()


if __name__ == "__main__":
    harness.main()
