"""bench/fastpath.sh --smoke --sections throughput end to end: the script sets up its veth pair,
starts NGINX and infergate in socket and afxdp modes one after the other, runs wrk against each
(inline and batched models), prints the throughput table and cleans up. Checks that every cell
of the table is there with non-zero req/s and latencies, no errors, batched runs that did
dispatch batches (a mean batch size >= 1 read from /metrics), and no namespace left behind.
Needs root, nginx and wrk (skips without them)."""
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


class FastpathSmokeTest(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root (network namespaces, XDP)")
        for tool in ("nginx", "wrk"):
            if shutil.which(tool) is None:
                self.skipTest(f"needs {tool}")

    def test_throughput_table(self):
        script = os.path.join(harness.ARGS.source, "bench", "fastpath.sh")
        p = subprocess.run([script, "--binary", harness.ARGS.binary, "--smoke", "--sections", "throughput"],
                           capture_output=True, text=True, timeout=240)
        out = p.stdout + p.stderr
        self.assertEqual(p.returncode, 0, out)
        self.assertIn("## throughput", out)
        row = re.compile(r"^(-|inline|batched)\s+(nginx|socket|afxdp)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)x\s+(?:([\d.]+)x\s+)?(\d+)$")
        cells = {}
        for line in out.splitlines():
            m = row.match(line)
            if m:
                cells[(m.group(1), m.group(2))] = m
        expected = {("-", "nginx")} | {(k, s) for k in ("inline", "batched") for s in ("socket", "afxdp")}
        self.assertEqual(set(cells), expected, out)
        for key, m in cells.items():
            rps, p50, p99, errors = int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(8))
            self.assertGreater(rps, 0, key)
            self.assertGreater(p50, 0, key)
            self.assertGreaterEqual(p99, p50, key)
            self.assertEqual(errors, 0, key)
            if key[0] == "batched":
                self.assertGreater(float(m.group(7)), 0, key)  # batched/inline ratio
        for mode in ("socket", "afxdp"):
            m = re.search(rf"^batch sizes, {mode} batched \(all rounds\): mean ([\d.]+) over (\d+) batches", out, re.M)
            self.assertIsNotNone(m, out)
            self.assertGreaterEqual(float(m.group(1)), 1.0, out)
            self.assertGreater(int(m.group(2)), 0, out)
        # Its own namespaces (others may be running the script at the same time) are gone.
        m = re.search(r"^# veth igfastpg(\w+) <-> ", out, re.M)
        self.assertIsNotNone(m, out)
        mine = {f"ig-fastp-gw-{m.group(1)}", f"ig-fastp-cl-{m.group(1)}"}
        self.assertEqual(namespaces() & mine, set(), "namespaces left behind")


if __name__ == "__main__":
    harness.main()
