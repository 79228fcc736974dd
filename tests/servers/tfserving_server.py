#!/usr/bin/python3
"""A TF Serving gRPC test server: tensorflow.serving.PredictionService/Predict with identity
semantics (output i = input i, renamed by --map IN=OUT; default INPUT0=OUTPUT0) over
tensor_content, and ModelService/GetModelStatus (version 1 AVAILABLE). Messages generated from
infergate's protos at start-up. Control: as kserve_server.py (/infergate.test.Control/Set
{"latency_ms", "fail_next", "fail_code", "ready"}, /Stats -> {"predict_requests",
"predict_request_bytes", "signatures"}). Prints "PORT <n>" once serving.
"""
import argparse
import json
import os
import sys
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stubs  # noqa: E402

stubs.generate()
import grpc  # noqa: E402
import tf_predict_pb2 as pb  # noqa: E402
import tf_model_status_pb2 as status_pb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="identity")
    ap.add_argument("--map", action="append", default=[])
    ap.add_argument("--latency-ms", type=float, default=0)
    args = ap.parse_args()
    mapping = dict(m.split("=") for m in (args.map or ["INPUT0=OUTPUT0"]))
    lock = threading.Lock()
    st = {"latency_ms": args.latency_ms, "fail_next": 0, "fail_code": "UNAVAILABLE", "ready": True}
    stats = {"predict_requests": 0, "predict_request_bytes": [], "signatures": []}

    def predict(req, ctx):
        with lock:
            stats["predict_requests"] += 1
            stats["signatures"].append(req.model_spec.signature_name)
            fail = st["fail_next"] > 0
            if fail:
                st["fail_next"] -= 1
            latency = st["latency_ms"]
        if fail:
            ctx.abort(getattr(grpc.StatusCode, st["fail_code"]), "injected failure")
        if req.model_spec.name != args.model:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(%s)" % req.model_spec.name)
        if latency:
            time.sleep(latency / 1000.0)
        resp = pb.PredictResponse()
        resp.model_spec.name = args.model
        resp.model_spec.version.value = 1
        resp.model_spec.signature_name = req.model_spec.signature_name
        for name, t in req.inputs.items():
            if name not in mapping:
                ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown input " + name)
            out = mapping[name]
            if req.output_filter and out not in req.output_filter:
                continue
            resp.outputs[out].CopyFrom(t)
        return resp

    def model_status(req, ctx):
        r = status_pb.GetModelStatusResponse()
        if req.model_spec.name == args.model:
            r.model_version_status.add(version=1, state=30 if st["ready"] else 10)
        else:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "Could not find any versions of model " + req.model_spec.name)
        return r

    def deser(b):
        with lock:
            stats["predict_request_bytes"].append(len(b))
        return pb.PredictRequest.FromString(b)

    def ctl_set(req, ctx):
        with lock:
            st.update(json.loads(req or b"{}"))
        return b"{}"

    def ctl_stats(req, ctx):
        with lock:
            return json.dumps(stats).encode()

    ser = lambda m: m.SerializeToString()  # noqa: E731
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((
        grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", {
            "Predict": grpc.unary_unary_rpc_method_handler(predict, deser, ser)}),
        grpc.method_handlers_generic_handler("tensorflow.serving.ModelService", {
            "GetModelStatus": grpc.unary_unary_rpc_method_handler(
                model_status, status_pb.GetModelStatusRequest.FromString, ser)}),
        grpc.method_handlers_generic_handler("infergate.test.Control", {
            "Set": grpc.unary_unary_rpc_method_handler(ctl_set),
            "Stats": grpc.unary_unary_rpc_method_handler(ctl_stats)})))
    port = server.add_insecure_port("127.0.0.1:%d" % args.port)
    server.start()
    print("PORT %d" % port, flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
