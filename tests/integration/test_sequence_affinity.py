"""Sequence affinity (docs/BACKENDS.md "Sequences"): a triton model over a pool of three KServe
test servers; nine concurrent sequences (KServe `sequence_id` parameter, integer and string
ids) with sequence_start / sequence_end, sent through infergate's REST API.

Asserts: every request of a sequence reaches the same server (each server records the
sequence ids and flags it saw: Control/Stats "sequences"), the parameters are forwarded (start
on the first, end on the last), each sequence request goes alone (batch size 1); one server
killed mid-sequence -> each of its sequences' next request gets 400 (FAILED_PRECONDITION)
naming the endpoint, the one after that 400 "not bound" (never moved to another server), while
the other sequences keep going on their own servers to their end; the bindings gauge ends at 0;
a sequence identified by the configured header (sequence_id_header), one sent over gRPC
(string id, bool flags) and one identified by that header as gRPC metadata stay on one server
each, their flags forwarded; a metadata id over 256 bytes gets INVALID_ARGUMENT.
"""
import json
import os
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import backend_fixture as bf  # noqa: E402
from backend_fixture import model_yaml, post_json  # noqa: E402
from backend_fixture import setUpModule, tearDownModule  # noqa: E402,F401

IDS = [1001, 1002, 1003, 1004, 1005, 1006, "seq-a", "seq-b", "seq-c"]


def header_infer(port, session, k, start=False):
    """A request whose sequence id is the x-session-id header (the model's sequence_id_header)."""
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [float(k)] * 16}]}
    if start:
        body["parameters"] = {"sequence_start": True}
    data = json.dumps(body).encode()
    s = harness.connect(port)
    try:
        s.sendall(("POST /v2/models/remote/infer HTTP/1.1\r\nHost: x\r\nX-Session-Id: %s\r\n"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % (session, len(data))).encode() + data)
        status, _, payload, _ = harness.read_response(s)
        return status, json.loads(payload or b"{}")
    finally:
        s.close()


def seq_infer(port, sid, k, start=False, end=False):
    vals = [float(k)] * 16
    params = {"sequence_id": sid}
    if start:
        params["sequence_start"] = True
    if end:
        params["sequence_end"] = True
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": vals}],
            "parameters": params}
    st, reply = post_json(port, "remote", body)
    return st, reply, vals


class SequenceAffinityTest(bf.BackendTestCase):
    def test_sequences_stay_and_end_clearly(self):
        servers = [self.server(), self.server(), self.server()]
        gw = self.start_gateway(model_yaml(endpoints=[s.address for s in servers],
                                           extra="      sequence_id_header: x-session-id"),
                                grpc_port=0)
        phase1 = threading.Barrier(len(IDS) + 1)
        phase2 = threading.Barrier(len(IDS) + 1)
        answers = {sid: [] for sid in IDS}  # sid -> [(phase, status, reply, sent values)]

        def run(sid):
            for k in range(4):  # the start and three more
                st, reply, vals = seq_infer(gw.port, sid, k, start=(k == 0))
                answers[sid].append((1, st, reply, vals))
            phase1.wait()
            phase2.wait()  # the main thread killed a server meanwhile
            for k in range(4, 8):
                st, reply, vals = seq_infer(gw.port, sid, k, end=(k == 7))
                answers[sid].append((2, st, reply, vals))
                if st != 200 and k == 5:
                    break

        threads = [threading.Thread(target=run, args=(sid,)) for sid in IDS]
        for t in threads:
            t.start()
        try:
            phase1.wait(timeout=30)
            for sid in IDS:
                for _, st, reply, vals in answers[sid]:
                    self.assertEqual(st, 200, reply)
                    self.assertEqual(reply["outputs"][0]["data"], vals)
            # Where each sequence went: exactly one server each.
            where = {}
            for s in servers:
                for sid, start, end in s.control("Stats").get("sequences", []):
                    key = sid if isinstance(sid, str) else int(sid)
                    self.assertIn(where.setdefault(key, s), [s], "sequence %r on two servers" % sid)
            self.assertEqual(sorted(map(str, where)), sorted(map(str, IDS)))
            for s in servers:
                seen = s.control("Stats").get("sequences", [])
                starts = [x[0] for x in seen if x[1]]
                mine = sorted({str(x[0]) for x in seen})
                self.assertEqual(sorted(map(str, starts)), mine)  # one start per sequence
                self.assertEqual(len(seen), 4 * len(mine))
            victim = max(servers, key=lambda s: sum(1 for v in where.values() if v is s))
            lost = sorted((sid for sid, s in where.items() if s is victim), key=str)
            kept = sorted((sid for sid, s in where.items() if s is not victim), key=str)
            self.assertGreater(len(kept), 0, "every sequence on one server")
            victim.kill()
            self.assertTrue(bf.wait_for(lambda: gw.metric(
                "infergate_backend_healthy", model="remote", endpoint=victim.address) == 0, timeout=5))
        finally:
            phase2.wait(timeout=30)
            for t in threads:
                t.join()
        for sid in lost:
            p2 = [a for a in answers[sid] if a[0] == 2]
            self.assertEqual(len(p2), 2, p2)
            st, reply, _ = p2[0][1], p2[0][2], None
            self.assertEqual(st, 400, reply)
            self.assertIn("sequence %s ended" % sid, reply["error"])
            self.assertIn(victim.address, reply["error"])
            self.assertEqual(p2[1][1], 400, p2[1][2])
            self.assertIn("not bound", p2[1][2]["error"])
        for sid in kept:
            p2 = [a for a in answers[sid] if a[0] == 2]
            self.assertEqual([a[1] for a in p2], [200] * 4, p2)
            for _, _, reply, vals in p2:
                self.assertEqual(reply["outputs"][0]["data"], vals)
            got = [x for x in where[sid].control("Stats")["sequences"] if str(x[0]) == str(sid)]
            self.assertEqual(len(got), 8)
            self.assertTrue(got[-1][2])  # sequence_end forwarded on the last
            for s in servers:
                if s is not where[sid] and s is not victim:
                    self.assertNotIn(str(sid), [str(x[0]) for x in s.control("Stats").get("sequences", [])])
        # Sequence requests went alone (the servers saw batches of one only).
        for s in servers:
            if s is not victim:
                self.assertEqual(set(s.control("Stats")["batch_sizes"]), {1})
        self.assertEqual(gw.metric("infergate_backend_sequences", model="remote"), 0)
        self.assertEqual(gw.metric("infergate_backend_sequence_broken_total", model="remote"), 2 * len(lost))
        # The configured header carries a (string) sequence id: its requests stay together too.
        for k in range(6):
            st, reply = header_infer(gw.port, "sess-1", k, start=(k == 0))
            self.assertEqual(st, 200, reply)
        saw = [s for s in servers if s is not victim and
               "sess-1" in [x[0] for x in s.control("Stats").get("sequences", [])]]
        self.assertEqual(len(saw), 1)
        self.assertEqual([x[0] for x in saw[0].control("Stats")["sequences"]].count("sess-1"), 6)
        # gRPC: the parameters of a ModelInferRequest (string id, bool flags), forwarded as sent.
        import grpc_service_pb2 as pb
        ch = bf.grpc.insecure_channel("127.0.0.1:%d" % gw.grpc_port)
        try:
            call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                  request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=pb.ModelInferResponse.FromString)
            for k in range(3):
                req = pb.ModelInferRequest(model_name="remote")
                req.parameters["sequence_id"].string_param = "grpc-1"
                if k == 0:
                    req.parameters["sequence_start"].bool_param = True
                if k == 2:
                    req.parameters["sequence_end"].bool_param = True
                req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
                req.raw_input_contents.append(struct.pack("<16f", *([float(k)] * 16)))
                resp = call(req, timeout=10)
                self.assertEqual(resp.raw_output_contents[0], req.raw_input_contents[0])
            # gRPC metadata: the configured header name carries the id (as in REST).
            for k in range(4):
                req = pb.ModelInferRequest(model_name="remote")
                if k == 0:
                    req.parameters["sequence_start"].bool_param = True
                req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
                req.raw_input_contents.append(struct.pack("<16f", *([float(k)] * 16)))
                resp = call(req, timeout=10, metadata=(("x-session-id", "grpc-meta"),))
                self.assertEqual(resp.raw_output_contents[0], req.raw_input_contents[0])
            req = pb.ModelInferRequest(model_name="remote")
            req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
            req.raw_input_contents.append(struct.pack("<16f", *([0.0] * 16)))
            with self.assertRaises(bf.grpc.RpcError) as too_long:
                call(req, timeout=10, metadata=(("x-session-id", "s" * 300),))
            self.assertEqual(too_long.exception.code(), bf.grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            ch.close()
        meta = [s for s in servers if s is not victim and
                "grpc-meta" in [x[0] for x in s.control("Stats").get("sequences", [])]]
        self.assertEqual(len(meta), 1)
        self.assertEqual([x[0] for x in meta[0].control("Stats")["sequences"]].count("grpc-meta"), 4)
        seen = [[x for x in s.control("Stats").get("sequences", []) if x[0] == "grpc-1"]
                for s in servers if s is not victim]
        seen = [x for x in seen if x]
        self.assertEqual(seen, [[["grpc-1", True, False], ["grpc-1", False, False], ["grpc-1", False, True]]])
        print("sequence affinity: %d sequences, %d ended by the kill, %d kept" % (len(IDS), len(lost), len(kept)))


if __name__ == "__main__":
    harness.main()
