"""Generates Python protobuf modules from infergate's protos (frontend/proto) and the test
servers' own (tests/servers/*.proto) into a temporary directory and puts it on sys.path."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))


def generate(out_dir=None):
    out_dir = out_dir or os.environ.get("INFERGATE_STUBS_DIR")  # shared, owned by the caller
    if out_dir is None:
        out_dir = tempfile.mkdtemp(prefix="infergate-stubs-")
        atexit.register(shutil.rmtree, out_dir, True)
    proto_dir = os.path.join(SOURCE, "frontend", "proto")
    files = [os.path.join(proto_dir, f) for f in ("grpc_service.proto", "tf_tensor.proto", "tf_predict.proto")]
    files += [os.path.join(HERE, f) for f in ("kserve_shm.proto", "tf_model_status.proto", "tf_metadata.proto")]
    subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I", proto_dir, "-I", HERE,
                    "--python_out=" + out_dir] + files, check=True)
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return out_dir
