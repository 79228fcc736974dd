"""deploy/systemd/infergate.service passes `systemd-analyze verify` (with ExecStart pointing at
the built binary), and the check itself fails on a broken copy of the unit. Skips with a message
where systemd-analyze is missing or cannot verify even a trivial unit (some containers)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

TRIVIAL = "[Unit]\nDescription=probe\n[Service]\nType=oneshot\nExecStart=/bin/true\n"


def verify(text, name="infergate.service"):
    """Writes `text` as a unit and verifies it; returns the problems found for it (empty: fine)."""
    with tempfile.TemporaryDirectory(prefix="ig-unit-") as d:
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True,
                           timeout=60)
        # Only what concerns this unit: a container may lack units the host has.
        lines = [l for l in (r.stdout + r.stderr).splitlines() if name in l or path in l]
        if r.returncode != 0 and not lines:
            lines = ["systemd-analyze exited %d: %s" % (r.returncode, (r.stdout + r.stderr).strip())]
        return lines


class SystemdUnitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("systemd-analyze") is None:
            raise unittest.SkipTest("needs systemd-analyze (the systemd package)")
        problems = verify(TRIVIAL, "ig-probe.service")
        if problems:
            raise unittest.SkipTest("systemd-analyze cannot verify here (container?): %s" % problems)
        with open(os.path.join(harness.ARGS.source, "deploy", "systemd", "infergate.service")) as f:
            cls.unit = f.read().replace("/usr/local/bin/infergate",
                                        os.path.abspath(harness.ARGS.binary))

    def test_unit_verifies(self):
        self.assertEqual(verify(self.unit), [])

    def test_the_check_catches_a_broken_unit(self):
        broken = self.unit.replace("ProtectSystem=strict", "ProtectSystem=strcit")
        self.assertNotEqual(verify(broken), [])
        broken = self.unit.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
        self.assertNotEqual(verify(broken), [])

    def test_hardening_is_there(self):
        for key in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                    "PrivateTmp=yes", "ProtectKernelTunables=yes", "CapabilityBoundingSet=",
                    "AmbientCapabilities=", "LimitMEMLOCK=",
                    "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK AF_XDP"):
            self.assertTrue(re.search("^" + re.escape(key), self.unit, re.M), key)


if __name__ == "__main__":
    harness.main()
