#!/usr/bin/python3
"""Dynamic batching benchmark: starts the real infergate binary (free ports, like
tests/integration/harness.py) and drives it with an open-loop load generator.

Part 1: throughput and latency (p50/p99) against offered load, batching on and off, for the
identity model with a GPU-like cost model (fixed + per-item us per batch, default 200 + 2,
max_batch_size 16). Off = the same model with `dynamic_batching: {enabled: false}`: every
request runs alone (200 + 2 us each).

Part 2: queue time per priority level (x-infergate-priority header, 4 levels, equal shares)
under 2x overload of a batched model. The default cost for this part is heavier (5000 + 50 us,
max batch 8, about 1480 req/s) so that 2x its capacity is a rate a Python client can offer on a
small machine; --prio-fixed-us/--prio-per-item-us change it.

Open loop: requests are sent on a fixed schedule (uniform spacing) over many keep-alive
connections (pipelined when a connection is busy), and latency runs from the *intended* send
time, so a slow server cannot slow the client down (no coordinated omission). A send that falls
behind schedule still counts from its intended time. The client is Python (asyncio, several
processes): check the "achieved" column; when it falls short of "offered" the client, not the
server, was the limit.

  /usr/bin/python3 bench/batching_bench.py --binary build/app/infergate
"""
import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402

MODEL_YAML = """
  - name: {name}
    version: "1"
    backend: identity
    max_batch_size: {max_batch}
    inputs:
      - {{name: INPUT0, datatype: FP32, shape: [16]}}
    outputs:
      - {{name: OUTPUT0, datatype: FP32, shape: [16]}}
    identity: {{fixed_us: {fixed_us}, per_item_us: {per_item_us}}}
    dynamic_batching:
{batching}"""

CONFIG = """mode: socket
reactors: {reactors}
listeners:
  - {{name: http, address: 127.0.0.1, port: 0, protocol: http}}
admin: {{address: 127.0.0.1, port: 0}}
logging: {{level: info, access_log: false}}
limits: {{max_connections: 4000}}
models:{models}
"""


class Gateway(harness.Gateway):
    """The gateway of tests/integration/harness.py on `binary` and `config_text`; metric()
    reads the one series with exactly these labels."""

    def __init__(self, binary, config_text):
        super().__init__(config_text=config_text, binary=binary)

    def metric(self, name, **labels):
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
        for line in self.metrics().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                series, _, value = line.rpartition(" ")
                got = series[len(name):].strip("{}")
                if ",".join(sorted(got.split(","))) == want or (not want and not got):
                    return float(value)
        return 0.0

    def stop(self):
        try:
            super().stop()
        except AssertionError:
            pass  # it did not stop within 10 s of SIGTERM and was killed


def body_bytes():
    b = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                     "data": [float(i) for i in range(16)]}]}
    return json.dumps(b).encode()


async def run_load(port, model, rate, duration, conns, levels, start_at):
    """One process's share: `rate` req/s for `duration` s over `conns` connections. Returns
    a list of (level, status, latency_s)."""
    body = body_bytes()
    reqs = {}
    for lvl in range(1, levels + 1):
        hdr = "x-infergate-priority: %d\r\n" % lvl if levels > 1 else ""
        reqs[lvl] = (("POST /v2/models/%s/infer HTTP/1.1\r\nHost: b\r\n%s"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n")
                     % (model, hdr, len(body))).encode() + body
    results = []
    streams = []
    for _ in range(conns):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        streams.append((r, w, []))

    async def reader(r, pending):
        buf = b""
        while True:
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buf[:end].lower()
                m = re.search(rb"content-length:\s*(\d+)", head)
                n = int(m.group(1)) if m else 0
                if len(buf) < end + 4 + n:
                    break
                status = int(head[9:12])
                buf = buf[end + 4 + n:]
                t_intended, lvl = pending.pop(0)
                results.append((lvl, status, time.monotonic() - t_intended, time.time()))
            data = await r.read(65536)
            if not data:
                return
            buf += data

    readers = [asyncio.create_task(reader(r, p)) for r, _, p in streams]
    total = int(rate * duration)
    interval = 1.0 / rate
    await asyncio.sleep(max(0.0, start_at - time.time()))
    t0 = time.monotonic()
    for i in range(total):
        t_int = t0 + i * interval
        delay = t_int - time.monotonic()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        lvl = 1 + i % levels
        r, w, pending = streams[i % conns]
        pending.append((t_int, lvl))
        w.write(reqs[lvl])
    drain_deadline = time.monotonic() + 30
    while len(results) < total and time.monotonic() < drain_deadline:
        await asyncio.sleep(0.05)
    lost = total - len(results)
    for _, w, _ in streams:
        w.close()
    for t in readers:
        t.cancel()
    return results, lost


def worker(args):
    port, model, rate, duration, conns, levels, start_at = args
    return asyncio.run(run_load(port, model, rate, duration, conns, levels, start_at))


def drive(gw, model, rate, duration, conns, procs, levels=1):
    start_at = time.time() + 0.5
    with mp.Pool(procs) as pool:
        parts = pool.map(worker, [(gw.port, model, rate / procs, duration, conns // procs,
                                   levels, start_at)] * procs)
    results = [x for p, _ in parts for x in p]
    lost = sum(l for _, l in parts)
    # Throughput: answers over the time from the first scheduled send to the last answer.
    span = max([r[3] for r in results], default=start_at) - start_at
    return [r[:3] for r in results], lost, span


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--rates", default="1000,2000,4000,6000,8000")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--reactors", type=int, default=2)
    ap.add_argument("--fixed-us", type=int, default=200)
    ap.add_argument("--per-item-us", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--prio-fixed-us", type=int, default=5000)
    ap.add_argument("--prio-per-item-us", type=int, default=50)
    ap.add_argument("--prio-max-batch", type=int, default=8)
    ap.add_argument("--prio-queue", type=int, default=512, help="max_total_queue_size")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-prio", action="store_true")
    a = ap.parse_args()

    if not a.skip_load:
        print("## Throughput and latency vs offered load (identity, %d us + %d us/item, "
              "max_batch_size %d, %d reactors, open loop, %d conns, %.0f s per point)"
              % (a.fixed_us, a.per_item_us, a.max_batch, a.reactors, a.conns, a.duration))
        print()
        print("| batching | offered req/s | achieved req/s | ok | errors | lost | p50 ms "
              "| p99 ms | mean batch |")
        print("|---|---|---|---|---|---|---|---|---|")
        for mode in ("on", "off"):
            batching = ("      max_queue_delay_us: 0\n      priority_levels: 1\n"
                        if mode == "on" else "      enabled: false\n")
            models = MODEL_YAML.format(name="m", max_batch=a.max_batch, fixed_us=a.fixed_us,
                                       per_item_us=a.per_item_us, batching=batching)
            gw = Gateway(a.binary, CONFIG.format(reactors=a.reactors, models=models))
            try:
                for rate in [int(x) for x in a.rates.split(",")]:
                    bc0 = gw.metric("infergate_batcher_batch_size_count", model="m")
                    bs0 = gw.metric("infergate_batcher_batch_size_sum", model="m")
                    res, lost, span = drive(gw, "m", rate, a.duration, a.conns, a.procs)
                    ok = [lat for _, st, lat in res if st == 200]
                    errors = len(res) - len(ok)
                    # achieved: 200s per second, first scheduled send to last answer
                    achieved = len(ok) / max(span, a.duration)
                    bc = gw.metric("infergate_batcher_batch_size_count", model="m") - bc0
                    bs = gw.metric("infergate_batcher_batch_size_sum", model="m") - bs0
                    mean_batch = "%.2f" % (bs / bc) if bc > 0 else "1 (unbatched)"
                    print("| %s | %d | %.0f | %d | %d | %d | %.2f | %.2f | %s |" % (
                        mode, rate, achieved, len(ok), errors, lost, pct(ok, 50) * 1e3,
                        pct(ok, 99) * 1e3, mean_batch), flush=True)
            finally:
                gw.stop()
        print()

    if not a.skip_prio:
        cap = a.prio_max_batch / ((a.prio_fixed_us + a.prio_per_item_us * a.prio_max_batch) / 1e6)
        rate = int(2 * cap)
        batching = ("      max_queue_delay_us: 0\n      priority_levels: 4\n"
                    "      max_total_queue_size: %d\n      overload_status: 503\n" % a.prio_queue)
        models = MODEL_YAML.format(name="p", max_batch=a.prio_max_batch, fixed_us=a.prio_fixed_us,
                                   per_item_us=a.prio_per_item_us, batching=batching)
        gw = Gateway(a.binary, CONFIG.format(reactors=a.reactors, models=models))
        try:
            before = {lvl: (gw.metric("infergate_batcher_queue_time_seconds_count", model="p",
                                      level=str(lvl)),
                            gw.metric("infergate_batcher_queue_time_seconds_sum", model="p",
                                      level=str(lvl))) for lvl in range(1, 5)}
            res, lost, _ = drive(gw, "p", rate, a.duration * 2, a.conns, a.procs, levels=4)
            print("## Queue time per priority level under 2x overload (identity, %d us + %d us/item,"
                  " max_batch_size %d: capacity about %.0f req/s; offered %d req/s, 4 levels in "
                  "equal shares via x-infergate-priority, max_total_queue_size %d, %.0f s)"
                  % (a.prio_fixed_us, a.prio_per_item_us, a.prio_max_batch, cap, rate,
                     a.prio_queue, a.duration * 2))
            print()
            print("| level | sent | 200 | 503 | other | mean queue ms (batcher) | p50 ms | p99 ms "
                  "(client, 200s) |")
            print("|---|---|---|---|---|---|---|---|")
            for lvl in range(1, 5):
                mine = [(st, lat) for l, st, lat in res if l == lvl]
                ok = [lat for st, lat in mine if st == 200]
                n503 = sum(1 for st, _ in mine if st == 503)
                c = gw.metric("infergate_batcher_queue_time_seconds_count", model="p",
                              level=str(lvl)) - before[lvl][0]
                s = gw.metric("infergate_batcher_queue_time_seconds_sum", model="p",
                              level=str(lvl)) - before[lvl][1]
                print("| %d | %d | %d | %d | %d | %s | %.2f | %.2f |" % (
                    lvl, len(mine), len(ok), n503, len(mine) - len(ok) - n503,
                    "%.2f" % (s / c * 1e3) if c > 0 else "-", pct(ok, 50) * 1e3,
                    pct(ok, 99) * 1e3))
            print()
            print("lost (no answer within 30 s after the run): %d" % lost)
        finally:
            gw.stop()


if __name__ == "__main__":
    main()
