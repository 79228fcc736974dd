"""scripts/demo.sh's build progress (scripts/lib/build-progress.sh) on a recorded build output:
the install-deps line, "configuring", ninja's [n/N] steps as one line per max(10, N/20) steps
(one updating line on a terminal), the whole output kept in the log, and on a failed build the
error printed in full with the build's exit status. No build is run."""
import os
import pty
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def recorded(steps=250, fail=False, restart=False):
    """A build's output as scripts/build.sh prints it through a pipe."""
    lines = ["install-deps: all 57 packages already installed"]
    if restart:  # CONFIGURE_DEPENDS: ninja re-runs cmake, then starts over with the real total
        lines += ["[0/2] Re-checking globbed directories...", "[1/2] Re-running CMake...",
                  "-- Configuring done", "[2/2] Re-checking"]
    lines += ["[%d/%d] Building CXX object app/CMakeFiles/x.dir/f%d.cc.o" % (i, steps, i)
              for i in range(1, steps + 1)]
    if fail:
        lines += ["FAILED: app/CMakeFiles/x.dir/bad.cc.o", "/usr/bin/c++ -c bad.cc",
                  "bad.cc:3:1: error: expected ';' before '}' token", "    3 | }",
                  "ninja: build stopped: subcommand failed."]
    return "\n".join(lines) + "\n"


class DemoProgressTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="infergate-progress-")
        self.out_path = os.path.join(self.tmp.name, "build-output")
        self.log = os.path.join(self.tmp.name, "build.log")
        self.lib = os.path.join(harness.ARGS.source, "scripts", "lib", "build-progress.sh")

    def tearDown(self):
        self.tmp.cleanup()

    def run_build(self, text, status=0):
        with open(self.out_path, "w") as f:
            f.write(text)
        script = 'set -e; source "%s"; run_build "%s" bash -c \'cat "%s"; exit %d\'' % (
            self.lib, self.log, self.out_path, status)
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=20)

    def test_one_line_per_steps_and_the_whole_log(self):
        r = self.run_build(recorded(250))
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "demo: install-deps: all 57 packages already installed")
        self.assertEqual(lines[1], "demo: configuring (cmake)...")
        self.assertEqual(lines[2], "demo: building: 250 steps")
        # Every 12 steps (250 / 20), then the last one.
        steps = [l for l in lines[3:]]
        self.assertEqual(steps[0], "demo: building [12/250] 4%")
        self.assertEqual(steps[-1], "demo: building [250/250] 100%")
        self.assertEqual(len(steps), 21)
        self.assertEqual(r.stderr, "")
        with open(self.log) as f:
            self.assertEqual(f.read(), recorded(250))

    def test_few_steps_print_every_ten(self):
        r = self.run_build(recorded(25))
        self.assertEqual([l for l in r.stdout.splitlines() if "[" in l],
                         ["demo: building [10/25] 40%", "demo: building [20/25] 80%",
                          "demo: building [25/25] 100%"])

    def test_ninja_restarting_after_cmake_announces_the_new_total(self):
        r = self.run_build(recorded(40, restart=True))
        self.assertIn("demo: building: 2 steps", r.stdout)
        self.assertIn("demo: building: 40 steps", r.stdout)
        self.assertIn("demo: building [40/40] 100%", r.stdout)

    def test_failure_prints_the_error_and_returns_the_status(self):
        r = self.run_build(recorded(30, fail=True), status=1)
        self.assertEqual(r.returncode, 1)
        self.assertIn("demo: the build failed (exit status 1); the error:", r.stderr)
        self.assertIn("FAILED: app/CMakeFiles/x.dir/bad.cc.o\n/usr/bin/c++ -c bad.cc\n"
                      "bad.cc:3:1: error: expected ';' before '}' token\n", r.stderr)
        self.assertIn("ninja: build stopped: subcommand failed.", r.stderr)
        self.assertIn("the whole build output is in " + self.log, r.stderr)
        self.assertNotIn("Building CXX object", r.stdout)

    def test_a_terminal_gets_one_updating_line(self):
        with open(self.out_path, "w") as f:
            f.write(recorded(30))
        pid, fd = pty.fork()
        if pid == 0:
            os.execvp("bash", ["bash", "-c", 'source "%s"; build_progress "%s" < "%s"' % (
                self.lib, self.log, self.out_path)])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.waitpid(pid, 0)
        text = out.decode()
        self.assertEqual(text.count("\r\x1b[K"), 30)
        self.assertIn("\r\x1b[Kdemo: building [30/30] 100%  app/CMakeFiles/x.dir/f30.cc.o\r\n", text)
        # One line for all 30 steps: the announcement, the updating line, nothing else.
        self.assertEqual(len([l for l in text.split("\r\n") if l]), 4)  # deps, cmake, total, steps

    def test_demo_uses_it(self):
        with open(os.path.join(harness.ARGS.source, "scripts", "demo.sh")) as f:
            demo = f.read()
        self.assertIn('run_build "$BUILD_LOG" bash scripts/build.sh', demo)
        self.assertNotIn("build.sh >/dev/null", demo)


if __name__ == "__main__":
    harness.main()
