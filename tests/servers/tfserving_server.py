#!/usr/bin/python3
"""A TF Serving gRPC test server: tensorflow.serving.PredictionService/Predict with identity
semantics (output i = input i, renamed by --map IN=OUT; default INPUT0=OUTPUT0; the TensorProto
is echoed as received, so tensor_content and string_val both come back),
PredictionService/GetModelMetadata (one signature, named --signature, default serving_default,
whose inputs/outputs are --input/--output NAME:DATATYPE:DIMS with KServe datatype names, e.g.
INPUT0:FP32:-1,16 or S:BYTES:-1,2; DIMS "*" = unknown rank; default: every --map pair as
FP32 [-1,16]) and ModelService/GetModelStatus (version 1 AVAILABLE). Predict for another
signature fails FAILED_PRECONDITION, as TF Serving's does. Messages generated from infergate's
protos at start-up. Control: as kserve_server.py (/infergate.test.Control/Set {"latency_ms",
"fail_next", "fail_code", "ready"}, /Stats -> {"predict_requests", "predict_request_bytes",
"signatures", "metadata_requests", "string_inputs", "batch_sizes" (first input's leading
dimension per Predict)}). Prints "PORT <n>" once serving.
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
import tf_metadata_pb2 as md_pb  # noqa: E402

# KServe datatype name -> tensorflow.DataType number (frontend/proto/tf_tensor.proto).
TF_DTYPES = {"BOOL": 10, "UINT8": 4, "UINT16": 17, "UINT32": 22, "UINT64": 23, "INT8": 6,
             "INT16": 5, "INT32": 3, "INT64": 9, "FP16": 19, "BF16": 14, "FP32": 1, "FP64": 2,
             "BYTES": 7}


def parse_tensor(spec):
    name, dtype, dims = spec.split(":")
    dtype = TF_DTYPES[dtype] if dtype in TF_DTYPES else int(dtype)  # a number: any DT_*
    if dims == "*":
        return name, dtype, None
    return name, dtype, [int(d) for d in dims.split(",") if d]


def signature_def_map(signature, inputs, outputs):
    sig = md_pb.SignatureDefMap()
    d = sig.signature_def[signature]
    d.method_name = "tensorflow/serving/predict"
    for field, specs in ((d.inputs, inputs), (d.outputs, outputs)):
        for name, dtype, dims in specs:
            info = field[name]
            info.name = name + ":0"
            info.dtype = dtype
            if dims is None:
                info.tensor_shape.unknown_rank = True
            else:
                for x in dims:
                    info.tensor_shape.dim.add(size=x)
    return sig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="identity")
    ap.add_argument("--map", action="append", default=[])
    ap.add_argument("--latency-ms", type=float, default=0)
    ap.add_argument("--signature", default="serving_default")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--output", action="append", default=[])
    args = ap.parse_args()
    mapping = dict(m.split("=") for m in (args.map or ["INPUT0=OUTPUT0"]))
    inputs = [parse_tensor(x) for x in args.input] or [(i, 1, [-1, 16]) for i in mapping]
    outputs = [parse_tensor(x) for x in args.output] or [(o, 1, [-1, 16]) for o in mapping.values()]
    sigmap = signature_def_map(args.signature, inputs, outputs)
    lock = threading.Lock()
    st = {"latency_ms": args.latency_ms, "fail_next": 0, "fail_code": "UNAVAILABLE", "ready": True}
    stats = {"predict_requests": 0, "predict_request_bytes": [], "signatures": [],
             "metadata_requests": 0, "string_inputs": [], "batch_sizes": []}

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
        if (req.model_spec.signature_name or "serving_default") != args.signature:
            ctx.abort(grpc.StatusCode.FAILED_PRECONDITION,
                      'Serving signature key "%s" not found.' % req.model_spec.signature_name)
        with lock:
            for t in req.inputs.values():
                if t.tensor_shape.dim:
                    stats["batch_sizes"].append(t.tensor_shape.dim[0].size)
                    break
            for t in req.inputs.values():
                if t.dtype == 7:
                    stats["string_inputs"].append([v.decode("latin-1") for v in t.string_val])
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

    def model_metadata(req, ctx):
        with lock:
            stats["metadata_requests"] += 1
        if req.model_spec.name != args.model:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "Could not find any versions of model " + req.model_spec.name)
        if list(req.metadata_field) != ["signature_def"]:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "Metadata field %s is not supported"
                      % list(req.metadata_field))
        r = md_pb.GetModelMetadataResponse()
        r.model_spec.name = args.model
        r.model_spec.version.value = 1
        r.metadata["signature_def"].Pack(sigmap)
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
            "Predict": grpc.unary_unary_rpc_method_handler(predict, deser, ser),
            "GetModelMetadata": grpc.unary_unary_rpc_method_handler(
                model_metadata, md_pb.GetModelMetadataRequest.FromString, ser)}),
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
