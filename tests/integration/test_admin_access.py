"""Who may use the admin listener (docs/SECURITY.md "Admin listener"), with curl from another
network namespace as the non-loopback peer.

The gateway runs in the gateway namespace with `admin.address: 0.0.0.0`:
  - without admin.token: start-up warns; from the client namespace GET /metrics and
    /v2/health/live answer 200, POST /admin/reload answers 403 and does not reload; from the
    gateway's own loopback it reloads (200);
  - with admin.token_file: the client's POST /admin/reload with the token reloads (200), without
    it or with a wrong one 401; the start-up log does not warn.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

CONFIG = """
mode: socket
reactors: 1
listeners: [{{name: http, address: 0.0.0.0, port: 8000, protocol: http}}]
admin: {{address: 0.0.0.0, port: 8002{token}}}
logging: {{level: info, access_log: false}}
models:
""" + harness.braces(harness.model_yaml("identity", [1, 16], 0))

TOKEN = "t0ken-for-the-admin-test-0123456789"


class AdminAccessTest(netns.VethTestCase):
    def curl(self, where, method, path, auth=None):
        host = "127.0.0.1" if where == "gw" else self.net.gw_ip
        cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method,
               "--max-time", "10", "http://%s:8002%s" % (host, path)]
        if auth:
            cmd[1:1] = ["-H", "Authorization: Bearer " + auth]
        if method == "POST":
            cmd[1:1] = ["--data", ""]
        run = self.net.run_gw if where == "gw" else self.net.run_client
        return int(run(cmd, check=False).stdout or 0)

    def reload_count(self):
        text = self.net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout
        return harness.parse_metric(text, "infergate_config_reloads_total")

    def test_without_a_token_only_loopback_may_reload(self):
        with self.gateway(CONFIG.format(token="")) as (p, log):
            with open(log) as f:
                text = f.read()
            self.assertIn("set admin.token", text)
            self.assertEqual(self.curl("client", "GET", "/metrics"), 200)
            self.assertEqual(self.curl("client", "GET", "/v2/health/live"), 200)
            before = self.reload_count()
            self.assertEqual(self.curl("client", "POST", "/admin/reload"), 403)
            self.assertEqual(self.curl("client", "POST", "/admin/reload", auth=TOKEN), 403)
            self.assertEqual(self.reload_count(), before)
            self.assertEqual(self.curl("gw", "POST", "/admin/reload"), 200)
            self.assertEqual(self.reload_count(), before + 1)

    def test_with_a_token_others_need_it(self):
        path = os.path.join(self.net.tmp, "admin.token")
        with open(path, "w") as f:
            f.write(TOKEN + "\n")
        with self.gateway(CONFIG.format(token=", token_file: " + path)) as (p, log):
            with open(log) as f:
                self.assertNotIn("set admin.token", f.read())
            before = self.reload_count()
            self.assertEqual(self.curl("client", "POST", "/admin/reload"), 401)
            self.assertEqual(self.curl("client", "POST", "/admin/reload", auth=TOKEN + "x"), 401)
            self.assertEqual(self.reload_count(), before)
            self.assertEqual(self.curl("client", "POST", "/admin/reload", auth=TOKEN), 200)
            self.assertEqual(self.reload_count(), before + 1)
            self.assertEqual(self.curl("client", "GET", "/metrics"), 200)


if __name__ == "__main__":
    harness.main()
