"""Client-chosen priority is a privilege (issue 13, item 5; docs/BATCHING.md "Priority").

Two real gateways in socket mode with a batched model of two priority levels (default 2), the
kernel's TCP from 127.0.0.1 as the client:
  - default config (priority.trusted_sources: loopback): the KServe `priority` parameter and the
    x-infergate-priority header choose level 1;
  - priority.trusted_sources without loopback: both are ignored, the request runs at the
    model's default level 2 (and a malformed header is not even looked at);
  - priority.from_client: all: honoured again from anywhere;
  - a reload that adds loopback to priority.trusted_sources applies live ("priority" applied):
    ignored before it, honoured after it, on the connection opened before the reload too.
The level each request was queued at is read from the batcher's per-level queue-time
histogram in /metrics.
"""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODEL = "\nmodels:\n" + harness.model_yaml("batched", [4], 8, version="1", backend=True, extra="""\
    dynamic_batching:
      max_queue_delay_us: 100
      priority_levels: 2
      default_priority_level: 2
""")

BASE = "\n" + harness.loopback_head()


def body(priority=None):
    b = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                     "data": [1.0, 2.0, 3.0, 4.0]}]}
    if priority is not None:
        b["parameters"] = {"priority": priority}
    return json.dumps(b).encode()


class ClientPriorityTest(unittest.TestCase):
    def levels_after(self, gw, requests, sock=None):
        """Sends each (priority parameter, header) request; returns the level each one ran at
        (on `sock` when given, else on a new connection)."""
        def counts():
            return {lvl: gw.metric("infergate_batcher_queue_time_seconds_count",
                                   model="batched", level=str(lvl)) for lvl in (1, 2)}
        out = []
        own = sock is None
        s = harness.connect(gw.port, timeout=10) if own else sock
        try:
            buf = b""
            for prio, header in requests:
                before = counts()
                extra = "x-infergate-priority: %s\r\n" % header if header is not None else ""
                b = body(prio)
                s.sendall(("POST /v2/models/batched/infer HTTP/1.1\r\nHost: x\r\n"
                           "Content-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
                           % (extra, len(b))).encode() + b)
                status, _, resp, buf = harness.read_response(s, buf)
                self.assertEqual(status, 200, resp)
                after = counts()
                ran = [lvl for lvl in (1, 2) if after[lvl] - before[lvl] == 1]
                self.assertEqual(len(ran), 1, "before %r after %r" % (before, after))
                out.append(ran[0])
        finally:
            if own:
                s.close()
        return out

    def run_with(self, priority_yaml):
        gw = harness.Gateway(config_text=BASE + priority_yaml + MODEL)
        try:
            return self.levels_after(gw, [(1, None), (None, "1"), (None, None)])
        finally:
            rc = gw.stop()
            self.assertEqual(rc, 0, gw.read_log())

    def test_loopback_is_trusted_by_default(self):
        self.assertEqual(self.run_with(""), [1, 1, 2])

    def test_untrusted_source_gets_the_default_level(self):
        self.assertEqual(self.run_with("priority: {trusted_sources: [192.0.2.0/24]}\n"),
                         [2, 2, 2])

    def test_from_client_all(self):
        self.assertEqual(
            self.run_with("priority: {from_client: all, trusted_sources: []}\n"), [1, 1, 2])

    def test_from_client_off(self):
        self.assertEqual(self.run_with("priority: {from_client: off}\n"), [2, 2, 2])

    def test_trusted_sources_change_applies_on_reload(self):
        gw = harness.Gateway(config_text=BASE + "priority: {trusted_sources: [192.0.2.0/24]}\n"
                             + MODEL)
        try:
            requests = [(1, None), (None, "1"), (None, None)]
            with harness.connect(gw.port, timeout=10) as early:
                self.assertEqual(self.levels_after(gw, requests, early), [2, 2, 2])
                with open(gw.config_path) as f:
                    text = f.read()
                with open(gw.config_path, "w") as f:
                    f.write(text.replace("[192.0.2.0/24]", "[192.0.2.0/24, 127.0.0.0/8]"))
                status, _, resp = harness.http_request(gw.admin_port, "POST", "/admin/reload")
                self.assertEqual(status, 200, resp)
                answer = json.loads(resp)
                self.assertEqual(answer["result"], "ok", answer)
                self.assertEqual(answer["applied"], ["priority"], answer)
                # The connection opened before the reload decides again under the new policy.
                self.assertEqual(self.levels_after(gw, requests, early), [1, 1, 2])
            self.assertEqual(self.levels_after(gw, requests), [1, 1, 2])
        finally:
            rc = gw.stop()
            self.assertEqual(rc, 0, gw.read_log())


if __name__ == "__main__":
    harness.main()
