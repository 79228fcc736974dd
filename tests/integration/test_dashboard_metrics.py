"""Every metric the Grafana dashboard (deploy/grafana/infergate.json) and the Prometheus alert
rules (deploy/prometheus/alerts.yaml) name exists in the /metrics of a running gateway (a
`# TYPE` line or a sample), and every label they select on or group by is a label of those
metrics (or a target label Prometheus adds: instance, job).

The gateways: socket mode with the identity model and a Triton-like test server behind a pool
(with its metrics URL, a failed batch, a refused HTTP request, so the families created on first
use appear), and, as root, afxdp mode in a network namespace with the XDP program, the GPU
watch on the stub libcuda.so.1 and a process doing GPU work on it (the XDP, TCP, AF_XDP and GPU
families). Without root those names are reported unverified (the test skips them, saying so);
without python3-grpcio the backend families are. A wrong name or label fails the test, and the
checker itself is tested on wrong names."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402
import backend_fixture as bf  # noqa: E402

# Labels Prometheus attaches to every scraped series (the target's), not the gateway.
TARGET_LABELS = {"instance", "job"}
# Series Prometheus makes itself (the scrape's health), usable in rules.
PROMETHEUS_SERIES = {"up"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "inf", "nan"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
# Names only the root run (afxdp in a namespace, GPU watch) can show.
FASTPATH_PREFIXES = ("infergate_xdp_", "infergate_tcp_", "infergate_afxdp_")
GPU_PREFIXES = ("infergate_gpu_",)
BACKEND_PREFIXES = ("infergate_backend_",)


def load_yaml(path):
    import yaml
    with open(path) as f:
        return yaml.safe_load(f)


def dashboard_exprs(dash):
    """(where, PromQL) for every query of a Grafana dashboard: panel targets (rows' nested
    panels too) and query variables."""
    out = []

    def walk(panels):
        for p in panels or []:
            for t in p.get("targets", []) or []:
                if t.get("expr"):
                    out.append(("panel %r" % p.get("title"), t["expr"]))
            walk(p.get("panels"))

    walk(dash.get("panels"))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q:
            out.append(("variable %r" % v.get("name"), q))
    return out


def alert_exprs(rules):
    out = []
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            out.append(("rule %r" % (r.get("alert") or r.get("record")), str(r["expr"])))
    return out


def analyze(expr):
    """The metric names of a PromQL expression (or a Grafana label_values() query), the label
    names each selector matches on ({metric: set}), and the label names of its by/without/on/
    ignoring/group_* clauses."""
    # Grafana's variables, then string literals, go first (their contents are no names).
    metrics, selectors, grouping = set(), {}, set()
    m = re.match(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*$", expr, re.S)
    if m:  # Grafana: label_values(selector, label)
        expr = m.group(1)
        grouping.add(m.group(2))
    e = re.sub(r"\$__\w+", "5m", expr)
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', e)
    e = re.sub(r"\$\w+", "x", e)
    tokens = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*|\d[\w.]*|=~|!~|!=|==|[{}()\[\],=]|\S", e)
    i = 0
    while i < len(tokens):
        t = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if t == "[":  # range or subquery: durations only
            while i < len(tokens) and tokens[i] != "]":
                i += 1
        elif re.match(r"[A-Za-z_:]", t):
            low = t.lower()
            if low in LABEL_LIST_KEYWORDS and nxt == "(":
                i += 2
                while i < len(tokens) and tokens[i] != ")":
                    if re.match(r"[A-Za-z_]", tokens[i]):
                        grouping.add(tokens[i])
                    i += 1
            elif nxt == "(" or nxt.lower() in LABEL_LIST_KEYWORDS or low in KEYWORDS:
                pass  # a function or aggregation (`sum by (...)`), or an operator keyword
            else:
                metrics.add(t)
                labels = selectors.setdefault(t, set())
                if nxt == "{":
                    i += 2
                    while i < len(tokens) and tokens[i] != "}":
                        if re.match(r"[A-Za-z_]", tokens[i]) and i + 1 < len(tokens) and \
                                tokens[i + 1] in ("=", "!=", "=~", "!~"):
                            labels.add(tokens[i])
                        i += 1
        i += 1
    return metrics, selectors, grouping


def parse_metrics(text):
    """({family or sample name}, {sample name: set of label names}) of Prometheus text."""
    names, labels = set(), {}
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) \S+", line)
        if m:
            names.add(m.group(1))
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})? ", line)
        if m:
            names.add(m.group(1))
            labels.setdefault(m.group(1), set()).update(re.findall(r'(\w+)="', m.group(3) or ""))
    return names, labels


def problems(exprs, names, labels, unverified_ok=lambda name: False):
    """What is wrong with `exprs` against one gateway's metrics: (problems, unverified names).
    A name that `unverified_ok` accepts and that is missing is unverified, not a problem."""
    bad, unverified = [], set()
    for where, expr in exprs:
        metrics, selectors, grouping = analyze(expr)
        known = set(TARGET_LABELS)
        for name in sorted(metrics):
            if name in PROMETHEUS_SERIES:
                continue
            if name not in names:
                if unverified_ok(name):
                    unverified.add(name)
                    known.add("*")  # its labels are unknown: no grouping check
                else:
                    bad.append("%s: no metric %s in /metrics" % (where, name))
                continue
            have = labels.get(name)
            if have is None:  # a family without samples yet: its labels cannot be seen
                if selectors.get(name) - TARGET_LABELS:
                    unverified.add(name + " (labels)")
                known.add("*")
                continue
            known |= have
            for l in sorted(selectors.get(name, set()) - have - TARGET_LABELS):
                bad.append("%s: %s has no label %r (it has %s)" % (where, name, l, sorted(have)))
        if "*" not in known:
            for l in sorted(grouping - known):
                bad.append("%s: grouping by %r, a label none of %s has" % (where, l, sorted(metrics)))
    return bad, unverified


def socket_metrics(binary):
    """/metrics of a socket-mode gateway with the identity model and, with python3-grpcio, a
    pool of one Triton-like test server (its metrics URL scraped; one batch fails INTERNAL), after
    one request per model and one HTTP request the codec refuses. Returns (text, why the backend
    families are missing or None)."""
    why = None
    server = None
    models = harness.IDENTITY_MODEL
    try:
        bf.set_up_stubs()
        server = bf.TestServer(metrics_port=0)
        models += bf.model_yaml(endpoints=['{address: "%s", metrics_url: "%s"}' % (
            server.address, server.metrics_url)])
    except unittest.SkipTest as e:
        why = str(e)
    gw = bf.start_gateway(models, grpc_port=0)
    try:
        assert bf.infer(gw.port, "identity", list(range(16)))[0] == 200
        if server is not None:
            assert bf.infer(gw.port, "remote", list(range(16)))[0] == 200
            server.control("Set", {"fail_next": 1, "fail_code": "INTERNAL"})
            bf.infer(gw.port, "remote", list(range(16)))
        with harness.connect(gw.port) as s:  # Content-Length and Transfer-Encoding: 400
            s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
            assert harness.read_response(s)[0] == 400
        return gw.metrics(), why
    finally:
        gw.stop()
        gw.tmp.cleanup()
        if server is not None:
            server.kill()
        bf.tear_down_stubs()


def root_metrics(binary):
    """/metrics of an afxdp gateway in a namespace (XDP program, TCP stack, AF_XDP), with the GPU
    watch on the stub libcuda.so.1 when it is built and a process allocating, launching and
    syncing through it. Returns (text, why the GPU families are missing or None); raises
    SkipTest without root or namespaces."""
    why = netns.have_root_and_netns()
    if why:
        raise unittest.SkipTest(why)
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    stub = os.path.join(build, "tests", "gpu", "stub", "libcuda.so.1")
    driver_bin = os.path.join(build, "tests", "gpu", "ig-cuda-driver")
    gpu_why = None
    if not (os.path.exists(stub) and os.path.exists(driver_bin)):
        gpu_why = "needs %s and %s (targets ig_stub_cuda, ig_cuda_driver)" % (stub, driver_bin)
    gpu = "" if gpu_why else "gpu: {enabled: true, library: %s, interval_ms: 100}\n" % stub
    with netns.VethPair() as net, tempfile.TemporaryDirectory(prefix="ig-dash-") as tmp:
        net.tmp = tmp
        cfg = ("mode: afxdp\nreactors: 1\n"
               "listeners: [{name: http, address: 0.0.0.0, port: 8000, protocol: http}]\n"
               "admin: {address: 127.0.0.1, port: 8002}\n"
               "xdp: {interface: %s, attach: native}\n" % net.gw_if + gpu +
               "models:\n" + harness.IDENTITY_MODEL)
        p, _ = netns.start_gateway(net, cfg)
        driver = None
        try:
            body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                                           "data": list(range(16))}]})
            r = net.run_client(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                                "-d", body, "http://%s:8000/v2/models/identity/infer" % net.gw_ip])
            assert r.stdout == "200", r.stdout
            if not gpu_why:
                driver = subprocess.Popen([driver_bin, "--lib", stub], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          text=True)
                assert driver.stdout.readline().startswith("ready")
                for line in ("alloc device 1048576", "launch 10", "sync ctx"):
                    driver.stdin.write(line + "\n")
                    driver.stdin.flush()
                    reply = driver.stdout.readline()
                    assert reply.startswith("ok"), (line, reply)
                deadline = time.time() + 5  # the monitor's next polls
                while True:
                    text = net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout
                    if "infergate_gpu_process_device_bytes{" in text and \
                            "infergate_gpu_process_sync_seconds_bucket{" in text or \
                            time.time() > deadline:
                        break
                    time.sleep(0.1)
            else:
                text = net.run_gw(["curl", "-s", "http://127.0.0.1:8002/metrics"]).stdout
            return text, gpu_why
        finally:
            if driver is not None:
                driver.kill()
                driver.wait()
                for f in (driver.stdin, driver.stdout):
                    f.close()
            assert netns.stop_gateway(p) == 0


class DashboardMetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            import yaml  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("needs python3-yaml (scripts/install-deps.sh)")
        src = harness.ARGS.source
        with open(os.path.join(src, "deploy", "grafana", "infergate.json")) as f:
            cls.dashboard = json.load(f)
        cls.rules = load_yaml(os.path.join(src, "deploy", "prometheus", "alerts.yaml"))
        cls.exprs = dashboard_exprs(cls.dashboard) + alert_exprs(cls.rules)
        cls.socket_text, cls.backend_why = socket_metrics(harness.ARGS.binary)
        try:
            cls.root_text, cls.gpu_why = root_metrics(harness.ARGS.binary)
            cls.root_why = None
        except unittest.SkipTest as e:
            cls.root_text, cls.gpu_why, cls.root_why = "", None, str(e)

    def unverifiable(self, name):
        """A name the runs that happened here could not show."""
        if self.root_why and name.startswith(FASTPATH_PREFIXES + GPU_PREFIXES):
            return True
        if self.gpu_why and name.startswith(GPU_PREFIXES):
            return True
        return bool(self.backend_why) and name.startswith(BACKEND_PREFIXES)

    def test_dashboard_and_rules_have_queries(self):
        where = [w for w, _ in self.exprs]
        self.assertGreaterEqual(sum(w.startswith("panel") for w in where), 30)
        self.assertGreaterEqual(sum(w.startswith("rule") for w in where), 15)
        ids = [p["id"] for p in self.dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        for p in self.dashboard["panels"]:
            if p["type"] != "row":
                self.assertTrue(p.get("targets"), p["title"])
                self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
        for g in self.rules["groups"]:
            for r in g["rules"]:
                self.assertIn(r["labels"]["severity"], ("critical", "warning", "info"), r["alert"])
                self.assertTrue(r["annotations"]["summary"], r["alert"])

    def test_every_metric_and_label_exists(self):
        names, labels = parse_metrics(self.socket_text + "\n" + self.root_text)
        bad, unverified = problems(self.exprs, names, labels, self.unverifiable)
        self.assertEqual(bad, [])
        if unverified:
            self.skipTest("not seen here (%s): %s" % (
                "; ".join(w for w in (self.root_why, self.gpu_why, self.backend_why) if w),
                ", ".join(sorted(unverified))))

    def test_the_check_catches_wrong_names(self):
        names, labels = parse_metrics(self.socket_text)
        wrong = [
            ("typo", "sum(rate(infergate_requests_totl[5m]))"),
            ("label", 'infergate_requests_total{protocl="kserve_http"}'),
            ("grouping", "sum by (modle) (rate(infergate_requests_total[5m]))"),
            ("variable", 'label_values(infergate_request_total{job=~"$job"}, model)'),
        ]
        expected = ["no metric infergate_requests_totl", "no label 'protocl'",
                    "grouping by 'modle'", "no metric infergate_request_total"]
        for (what, expr), want in zip(wrong, expected):
            bad, _ = problems([(what, expr)], names, labels)
            self.assertTrue(any(want in b for b in bad), (what, bad))
        right = [("ok", 'histogram_quantile(0.99, sum by (le, model) (rate('
                        'infergate_request_duration_seconds_bucket{model=~"$model", job=~"$job"}'
                        '[$__rate_interval])))'),
                 ("ok", 'up{job="infergate"} == 0 and on (instance) infergate_connections_active')]
        self.assertEqual(problems(right, names, labels), ([], set()))


if __name__ == "__main__":
    harness.main()
