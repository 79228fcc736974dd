"""deploy/kubernetes renders with `kubectl kustomize` (Debian's kubernetes-client) in the base
and every overlay, and the rendered objects are what docs/DEPLOY.md promises: each container's
capabilities equal the mode's row of the table in docs/DEPLOY.md ("k8s-privileges"), nothing
is privileged or may gain privileges, the DaemonSet runs on the host network one node at a time
with its priority class, the probes point at routes the gateway serves, the metrics Service is
headless over the admin port, and the ConfigMap's configuration passes `infergate check-config`.

Then the gateway is started the way the rendered pod would start it, from the rendered
ConfigMap (addresses and interface adapted to the test), as the rendered user, with exactly the
rendered capabilities and no_new_privs (setpriv): socket mode anywhere (as uid 65532 with no
capability when the test runs as root), xdp-filter and afxdp as root in a network namespace.
Each probe is requested where the kubelet would request it (from the node itself) and must
answer 200, also when started again on the pins of the previous run (a pod restart); an XDP
mode started without any one of its capabilities must fail. Skips without kubectl or python3-yaml; the XDP part
without root."""
import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import netns  # noqa: E402

TREES = ["base", "overlays/socket", "overlays/xdp-filter", "overlays/afxdp"]
KINDS = ["Namespace", "PriorityClass", "ServiceAccount", "ConfigMap", "Service", "DaemonSet"]
CLUSTER_SCOPED = {"Namespace", "PriorityClass"}
BPFFS_HOST_PATH = "/sys/fs/bpf/infergate"
# What kubectl's SIGTERM-to-serving path may take on a loaded CI machine.
START_TIMEOUT = 20


def doc_table(source):
    """The "k8s-privileges" table of docs/DEPLOY.md: {mode: row} with start_uid, serve_uid,
    caps (a sorted list), ready_path, ready_port (a port name) and bpffs (bool)."""
    with open(os.path.join(source, "docs", "DEPLOY.md")) as f:
        text = f.read()
    m = re.search(r"<!-- k8s-privileges.*?-->\n(.*?)<!-- end k8s-privileges -->", text, re.S)
    assert m, "docs/DEPLOY.md has no k8s-privileges table"
    rows = {}
    for line in m.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 7, line
        ready = re.findall(r"`([^`]+)`", cells[5])
        rows[re.search(r"`([^`]+)`", cells[0]).group(1)] = {
            "start_uid": int(re.search(r"uid (\d+)", cells[2]).group(1)),
            "serve_uid": int(re.search(r"uid (\d+)", cells[3]).group(1)),
            "caps": sorted(re.findall(r"`([A-Z_]+)`", cells[4])),
            "ready_path": ready[0], "ready_port": ready[1],
            "bpffs": cells[6] == "yes"}
        assert rows[list(rows)[-1]]["caps"] or cells[4] == "none", line
    return rows


def render(kubectl, source, tree):
    import yaml
    r = subprocess.run([kubectl, "kustomize", os.path.join(source, "deploy", "kubernetes", tree)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "kubectl kustomize %s: %s" % (tree, r.stderr)
    return [o for o in yaml.safe_load_all(r.stdout) if o]


def one(objs, kind):
    found = [o for o in objs if o.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def config_of(objs):
    import yaml
    cm = one(objs, "ConfigMap")
    return yaml.safe_load(cm["data"]["infergate.yaml"])


def named_ports(container):
    return {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}


def port_roles(cfg):
    """{port number: "listener NAME" or "admin"} of a configuration."""
    roles = {l.get("port", 8000): "listener " + l.get("name", "http") for l in cfg["listeners"]}
    roles[cfg.get("admin", {}).get("port", 8002)] = "admin"
    return roles


def manifest_problems(objs, table, tree):
    """What is wrong with one rendered tree; [] when it keeps every promise."""
    bad = []
    for k in KINDS:
        if one(objs, k) is None:
            bad.append("exactly one %s expected" % k)
    if bad:
        return bad
    ns = one(objs, "Namespace")["metadata"]["name"]
    for o in objs:
        got = o["metadata"].get("namespace")
        if o["kind"] in CLUSTER_SCOPED and got is not None:
            bad.append("%s %s is cluster-scoped but has namespace %s" % (o["kind"], o["metadata"]["name"], got))
        if o["kind"] not in CLUSTER_SCOPED and got != ns:
            bad.append("%s %s is in namespace %r, not %r" % (o["kind"], o["metadata"]["name"], got, ns))
    cfg = config_of(objs)
    mode = cfg.get("mode", "socket")
    if tree == "base" and mode != "socket":
        bad.append("the base serves %s, not socket" % mode)
    if tree.startswith("overlays/") and mode != tree.split("/")[1]:
        bad.append("overlay %s configures mode %s" % (tree, mode))
    row = table.get(mode)
    if row is None:
        return bad + ["mode %s has no row in docs/DEPLOY.md's table" % mode]
    ds = one(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    if pod.get("hostNetwork") is not True:
        bad.append("hostNetwork is not true")
    if pod.get("dnsPolicy") != "ClusterFirstWithHostNet":
        bad.append("dnsPolicy is %r" % pod.get("dnsPolicy"))
    for key in ("hostPID", "hostIPC"):
        if pod.get(key):
            bad.append("%s is set" % key)
    if pod.get("priorityClassName") != one(objs, "PriorityClass")["metadata"]["name"]:
        bad.append("priorityClassName %r is not the PriorityClass" % pod.get("priorityClassName"))
    if pod.get("serviceAccountName") != one(objs, "ServiceAccount")["metadata"]["name"]:
        bad.append("serviceAccountName %r is not the ServiceAccount" % pod.get("serviceAccountName"))
    if pod.get("automountServiceAccountToken") is not False:
        bad.append("the service account token is mounted")
    us = ds["spec"].get("updateStrategy", {})
    if us.get("type") != "RollingUpdate" or us.get("rollingUpdate", {}).get("maxUnavailable") != 1:
        bad.append("updateStrategy is not RollingUpdate with maxUnavailable 1: %r" % us)
    cm_name = one(objs, "ConfigMap")["metadata"]["name"]
    if not any(v.get("configMap", {}).get("name") == cm_name for v in pod.get("volumes", [])):
        bad.append("no volume of the ConfigMap %s" % cm_name)
    pod_sc = pod.get("securityContext", {})
    for key in ("runAsUser", "runAsNonRoot", "runAsGroup"):
        if key in pod_sc:
            bad.append("the pod's securityContext sets %s (set per container)" % key)
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    if len(pod.get("containers", [])) != 1:
        bad.append("one container expected")
    for c in containers:
        sc = c.get("securityContext", {})
        name = c.get("name")
        if sc.get("privileged") is not False:
            bad.append("%s: privileged is %r, not false" % (name, sc.get("privileged")))
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append("%s: allowPrivilegeEscalation is %r, not false" % (name, sc.get("allowPrivilegeEscalation")))
        if sc.get("readOnlyRootFilesystem") is not True:
            bad.append("%s: readOnlyRootFilesystem is not true" % name)
        caps = sc.get("capabilities", {})
        if caps.get("drop") != ["ALL"]:
            bad.append("%s: capabilities.drop is %r, not [ALL]" % (name, caps.get("drop")))
        if sorted(caps.get("add") or []) != row["caps"]:
            bad.append("%s: capabilities %s, docs/DEPLOY.md says %s for %s" % (
                name, sorted(caps.get("add") or []), row["caps"], mode))
        if sc.get("runAsUser") != row["start_uid"]:
            bad.append("%s: runAsUser %r, docs/DEPLOY.md says %d" % (name, sc.get("runAsUser"), row["start_uid"]))
        if sc.get("runAsNonRoot") is not (row["start_uid"] != 0):
            bad.append("%s: runAsNonRoot %r with uid %d" % (name, sc.get("runAsNonRoot"), row["start_uid"]))
        if sc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            bad.append("%s: seccompProfile is not RuntimeDefault" % name)
    sec = cfg.get("security", {})
    if row["serve_uid"] != row["start_uid"]:
        if str(sec.get("user")) != str(row["serve_uid"]) or str(sec.get("group")) != str(row["serve_uid"]):
            bad.append("security.user/group %r/%r, docs/DEPLOY.md says it serves as %d" % (
                sec.get("user"), sec.get("group"), row["serve_uid"]))
    elif sec.get("user"):
        bad.append("security.user %r in a mode that starts as its user" % sec.get("user"))
    if sec.get("drop_privileges") is False or sec.get("seccomp") is False:
        bad.append("security: the drop or the seccomp filter is off")
    # Volumes from the host: the bpffs directory in the XDP modes, nothing else.
    host = [v for v in pod.get("volumes", []) if "hostPath" in v]
    c = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    if row["bpffs"]:
        if len(host) != 1 or host[0]["hostPath"].get("path") != BPFFS_HOST_PATH:
            bad.append("hostPath volumes %r, expected only %s" % (host, BPFFS_HOST_PATH))
        elif mounts.get(host[0]["name"]) != cfg.get("xdp", {}).get("pin_path"):
            bad.append("bpffs mounted at %r, xdp.pin_path is %r" % (
                mounts.get(host[0]["name"]), cfg.get("xdp", {}).get("pin_path")))
    elif host:
        bad.append("hostPath volumes in %s mode: %r" % (mode, host))
    # Ports: the configuration's, by name; the admin listener reachable from the node's address.
    ports = named_ports(c)
    roles = port_roles(cfg)
    for pname, number in ports.items():
        want = "admin" if pname == "admin" else "listener " + pname
        if roles.get(number) != want:
            bad.append("container port %s=%d is %r in the configuration" % (pname, number, roles.get(number)))
    if cfg.get("admin", {}).get("address") != "0.0.0.0":
        bad.append("admin.address is %r: the kubelet and Prometheus cannot reach it" % cfg.get("admin", {}).get("address"))

    def probe(kind):
        p = c.get(kind) or {}
        g = p.get("httpGet") or {}
        return g.get("path"), g.get("port")

    for kind in ("startupProbe", "livenessProbe"):
        if probe(kind) != ("/v2/health/live", "admin"):
            bad.append("%s is %r, not /v2/health/live on the admin port" % (kind, probe(kind)))
    if probe("readinessProbe") != (row["ready_path"], row["ready_port"]):
        bad.append("readinessProbe is %r, docs/DEPLOY.md says %s on %s" % (
            probe("readinessProbe"), row["ready_path"], row["ready_port"]))
    svc = one(objs, "Service")
    labels = ds["spec"]["template"]["metadata"].get("labels", {})
    if svc["spec"].get("clusterIP") != "None":
        bad.append("the metrics Service is not headless")
    if not svc["spec"].get("selector") or any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        bad.append("the metrics Service does not select the DaemonSet's pods")
    targets = [ports.get(p.get("targetPort"), p.get("targetPort")) for p in svc["spec"].get("ports", [])]
    if targets != [cfg.get("admin", {}).get("port", 8002)]:
        bad.append("the metrics Service targets %r, not the admin port" % targets)
    return bad


def check_config(binary, text):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        return subprocess.run([binary, "check-config", "-c", f.name], capture_output=True, text=True)


def setpriv(uid, caps):
    """The command prefix that starts a process as a rendered container would: uid (and gid)
    `uid`, exactly `caps` (a root process gets its bounding set), no ambient or inheritable
    capabilities, no_new_privs (allowPrivilegeEscalation: false)."""
    cmd = ["setpriv"]
    if uid != 0:
        cmd += ["--reuid", str(uid), "--regid", str(uid), "--clear-groups"]
    cmd += ["--bounding-set", ",".join(["-all"] + ["+" + c.lower() for c in caps]),
            "--inh-caps=-all", "--no-new-privs", "--"]
    return cmd


def wait_serving(proc, log_path, timeout=START_TIMEOUT):
    """The log once it says "serving", or None when the process exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(log_path) as f:
            text = f.read()
        if re.search(r"serving: mode", text):
            return text
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    raise AssertionError("infergate neither served nor exited in %ds" % timeout)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("infergate did not stop within 20 s of SIGTERM")
    return proc.returncode


def tail(path, n=3000):
    with open(path) as f:
        return f.read()[-n:]


def status_uid(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))


class DeployManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        try:
            import yaml  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("needs python3-yaml (scripts/install-deps.sh)")
        cls.kubectl = shutil.which("kubectl")
        if cls.kubectl is None:
            raise unittest.SkipTest("needs kubectl for `kubectl kustomize` (Debian's "
                                    "kubernetes-client; scripts/install-deps.sh)")
        cls.table = doc_table(harness.ARGS.source)
        cls.rendered = {t: render(cls.kubectl, harness.ARGS.source, t) for t in TREES}

    def test_table_covers_the_overlays(self):
        self.assertEqual(sorted(self.table), ["afxdp", "socket", "xdp-filter"])
        self.assertEqual(self.table["socket"]["caps"], [])

    def test_rendered_objects_keep_the_promises(self):
        for tree, objs in self.rendered.items():
            with self.subTest(tree=tree):
                self.assertEqual(manifest_problems(objs, self.table, tree), [])

    def test_the_check_catches_broken_manifests(self):
        objs = self.rendered["overlays/xdp-filter"]

        def broken(change):
            o = copy.deepcopy(objs)
            change(one(o, "DaemonSet")["spec"]["template"]["spec"]["containers"][0], o)
            return manifest_problems(o, self.table, "overlays/xdp-filter")

        def add_cap(c, o):
            c["securityContext"]["capabilities"]["add"].append("SYS_ADMIN")

        def drop_cap(c, o):
            c["securityContext"]["capabilities"]["add"].remove("PERFMON")

        def privileged(c, o):
            c["securityContext"]["privileged"] = True

        def escalation(c, o):
            del c["securityContext"]["allowPrivilegeEscalation"]

        def probe_path(c, o):
            c["livenessProbe"]["httpGet"]["path"] = "/healthz"

        def ready_port(c, o):
            c["readinessProbe"]["httpGet"]["port"] = "admin"

        def admin_loopback(c, o):
            cm = one(o, "ConfigMap")
            cm["data"]["infergate.yaml"] = cm["data"]["infergate.yaml"].replace(
                "address: 0.0.0.0, port: 8002", "address: 127.0.0.1, port: 8002")

        for change, want in ((add_cap, "capabilities"), (drop_cap, "capabilities"),
                             (privileged, "privileged"), (escalation, "allowPrivilegeEscalation"),
                             (probe_path, "livenessProbe"), (ready_port, "readinessProbe"),
                             (admin_loopback, "admin.address")):
            with self.subTest(change=change.__name__):
                bad = broken(change)
                self.assertTrue(any(want in b for b in bad), bad)

    def test_configmaps_pass_check_config(self):
        for tree, objs in self.rendered.items():
            with self.subTest(tree=tree):
                text = one(objs, "ConfigMap")["data"]["infergate.yaml"]
                r = check_config(harness.ARGS.binary, text)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(": OK (mode %s" % config_of(objs).get("mode", "socket"), r.stdout)
        r = check_config(harness.ARGS.binary, text.replace("reactors:", "reactor:"))
        self.assertEqual(r.returncode, 2)

    def test_containerfile_matches_the_manifests(self):
        """The image builds with scripts/build.sh on Debian 12, its runtime stage's user is the
        uid the socket pod runs as, and the build context leaves out build trees and .git."""
        src = harness.ARGS.source
        with open(os.path.join(src, "Containerfile")) as f:
            text = f.read()
        # The stages start from build args (BASE, RUNTIME_BASE) whose defaults are Debian 12.
        args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
        stages = [(re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), img), name)
                  for img, name in re.findall(r"^FROM (\S+)(?: AS (\w+))?", text, re.M)]
        self.assertEqual([img.split(":")[0].split("/")[-1] for img, _ in stages], ["debian", "debian"])
        self.assertTrue(all("bookworm" in img for img, _ in stages), stages)
        self.assertRegex(text, r"RUN .*bash scripts/build\.sh")
        self.assertTrue(os.path.exists(os.path.join(src, "scripts", "build.sh")))
        runtime = text[text.rindex("FROM "):]
        self.assertIn("COPY --from=build /out/infergate /usr/local/bin/infergate", runtime)
        user = re.search(r"^USER (\d+):(\d+)$", runtime, re.M)
        uid = self.table["socket"]["serve_uid"]
        self.assertEqual((int(user.group(1)), int(user.group(2))), (uid, uid))
        sc = one(self.rendered["base"], "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(sc["securityContext"]["runAsUser"], uid)
        with open(os.path.join(src, ".containerignore")) as f:
            ignored = f.read().split()
        for path in (".git", "build", "build-*"):
            self.assertIn(path, ignored)

    def test_commented_triton_example_passes_check_config(self):
        """The commented Triton model under "# Uncomment for a Triton fleet", uncommented."""
        for tree, objs in self.rendered.items():
            with self.subTest(tree=tree):
                lines = one(objs, "ConfigMap")["data"]["infergate.yaml"].splitlines()
                start = next(i for i, l in enumerate(lines) if "# Uncomment for a Triton fleet" in l)
                out, block = lines[:start], False
                for l in lines[start:]:
                    if l.startswith("  # - ") or (block and l.startswith("  #   ")):
                        block = True
                        out.append("  " + l[4:])
                    else:
                        out.append(l)
                r = check_config(harness.ARGS.binary, "\n".join(out) + "\n")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("2 model(s)", r.stdout)

    def test_socket_pod_serves_its_probes(self):
        """The base's configuration on loopback and free ports, started as the rendered
        container starts (uid 65532, no capability, no_new_privs) when running as root."""
        import yaml
        objs = self.rendered["overlays/socket"]
        cfg = config_of(objs)
        c = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
        sc = c["securityContext"]
        for l in cfg["listeners"]:
            l["address"], l["port"] = "127.0.0.1", 0
        cfg["admin"].update(address="127.0.0.1", port=0)
        with tempfile.TemporaryDirectory(prefix="ig-k8s-") as tmp:
            os.chmod(tmp, 0o755)
            path = os.path.join(tmp, "infergate.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(cfg, f)
            os.chmod(path, 0o644)
            prefix = setpriv(sc["runAsUser"], sc["capabilities"].get("add") or []) \
                if os.geteuid() == 0 else []
            binary = harness.ARGS.binary
            if prefix and subprocess.run(prefix + [binary, "--version"],
                                         capture_output=True).returncode != 0:
                # The build tree is not reachable by that user (a checkout under /root): the
                # same binary from a folder it may read.
                binary = os.path.join(tmp, "infergate")
                shutil.copy(harness.ARGS.binary, binary)
                os.chmod(binary, 0o755)
            log_path = os.path.join(tmp, "log")
            with open(log_path, "w") as log:
                p = subprocess.Popen(prefix + [binary, "run", "-c", path],
                                     stdout=log, stderr=subprocess.STDOUT)
            try:
                text = wait_serving(p, log_path)
                self.assertIsNotNone(text, tail(log_path))
                actual = {"listener " + m.group(1): int(m.group(2)) for m in
                          re.finditer(r"listener '(\w+)' on [^ ]+:(\d+)", text)}
                actual["admin"] = int(re.search(r"admin listener on [^ ]+:(\d+)", text).group(1))
                roles = {name: port_roles(config_of(objs))[n] for name, n in named_ports(c).items()}
                for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                    g = c[kind]["httpGet"]
                    status = harness.http_request(actual[roles[g["port"]]], "GET", g["path"])[0]
                    self.assertEqual(status, 200, (kind, g))
                # The check means something: an unknown route is 404 on both listeners.
                self.assertEqual(harness.http_request(actual["admin"], "GET", "/healthz")[0], 404)
                if os.geteuid() == 0:
                    self.assertEqual(status_uid(p.pid), sc["runAsUser"])
            finally:
                self.assertEqual(stop(p), 0, tail(log_path))

    def test_xdp_pods_start_with_exactly_their_capabilities(self):
        why = netns.have_root_and_netns()
        if why:
            self.skipTest(why)
        for mode in ("xdp-filter", "afxdp"):
            with self.subTest(mode=mode):
                self.check_xdp_pod(mode)

    def check_xdp_pod(self, mode):
        import yaml
        objs = self.rendered["overlays/" + mode]
        cfg = config_of(objs)
        c = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
        sc = c["securityContext"]
        caps = sc["capabilities"]["add"]
        roles = {name: port_roles(cfg)[n] for name, n in named_ports(c).items()}
        serve_uid = self.table[mode]["serve_uid"]
        with netns.VethPair() as net, tempfile.TemporaryDirectory(prefix="ig-k8s-") as tmp:
            cfg["xdp"]["interface"] = net.gw_if
            cfg["reactors"] = net.queues  # afxdp: one per rx queue of the veth
            # The pod's mount of the node's /sys/fs/bpf/infergate: a directory of a bpffs.
            cfg["xdp"]["pin_path"] = "/sys/fs/bpf/infergate"
            path = os.path.join(tmp, "infergate.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(cfg, f)

            def start(with_caps, name):
                log_path = os.path.join(tmp, name + ".log")
                with open(log_path, "w") as log:
                    p = net.popen_gw(setpriv(sc["runAsUser"], with_caps) +
                                     [harness.ARGS.binary, "run", "-c", path],
                                     stdout=log, stderr=subprocess.STDOUT)
                return p, log_path, wait_serving(p, log_path)

            def get(port_name, path, where="gw"):
                port = {"admin": cfg["admin"]["port"]}.get(roles[port_name]) or \
                    next(l["port"] for l in cfg["listeners"] if "listener " + l["name"] == roles[port_name])
                curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2",
                        "http://%s:%d%s" % (net.gw_ip, port, path)]
                r = (net.run_gw if where == "gw" else net.run_client)(curl, check=False)
                return r.stdout

            warning = ("xdp.pin_path /sys/fs/bpf/infergate: chown to %d: Operation not permitted "
                       "(the pins will stay after exit)" % serve_uid)
            for run in ("first", "restart"):
                # A restarted pod finds the pins of the previous one (root's directory): it must
                # replace them.
                p, log_path, text = start(caps, run)
                try:
                    self.assertIsNotNone(text, tail(log_path))
                    # The kubelet probes from the node itself: here, the gateway's namespace.
                    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                        g = c[kind]["httpGet"]
                        self.assertEqual(get(g["port"], g["path"]), "200", (kind, g))
                    self.assertEqual(get("http", "/v2/health/ready", where="client"), "200")
                    if mode == "afxdp":
                        # Why its readiness probe uses the admin port: from the node itself the
                        # data port has no kernel socket behind it.
                        self.assertEqual(get("http", "/v2/health/ready"), "000")
                    self.assertEqual(status_uid(p.pid), serve_uid)
                    self.assertIn(warning, text)
                finally:
                    self.assertEqual(stop(p), 0, tail(log_path))
            for cap in caps:
                p, log_path, text = start([x for x in caps if x != cap], "without-" + cap)
                try:
                    self.assertIsNone(text, "served without CAP_%s" % cap)
                    self.assertNotEqual(p.returncode, 0)
                finally:
                    stop(p)


if __name__ == "__main__":
    harness.main()
