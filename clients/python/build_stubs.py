"""Generates the switchyard.v1 stubs (messages and gRPC services) with grpc_tools.

    python3 build_stubs.py [OUT_DIR]      # default: src/, for working in a checkout

setup.py calls generate() at build time. The stubs go to OUT_DIR/switchyard/v1/, so they
import each other as switchyard.v1.*_pb2, as the proto package says.
"""

import glob
import os
import sys


def generate(proto_dir, out_dir):
    """Runs protoc on every proto_dir/switchyard/v1/*.proto into out_dir; raises on failure."""
    from grpc_tools import protoc  # imported here: only building needs grpc_tools
    import grpc_tools

    proto_dir = os.path.abspath(proto_dir)
    sources = sorted(glob.glob(os.path.join(proto_dir, "switchyard", "v1", "*.proto")))
    if not sources:
        raise RuntimeError(
            f"no switchyard/v1/*.proto under {proto_dir}: build from a Switchyard checkout "
            "(clients/python), or set SWITCHYARD_PROTO_DIR to its proto/ folder"
        )
    # The well-known types (duration, timestamp, field_mask) ship inside grpc_tools.
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    package = os.path.join(out_dir, "switchyard", "v1")
    os.makedirs(package, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
    if protoc.main(args + sources) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed on {proto_dir}")
    init = os.path.join(package, "__init__.py")
    if not os.path.exists(init):
        with open(init, "w") as f:
            f.write('"""Generated from proto/switchyard/v1 at build time."""\n')


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "src")
    generate(os.path.join(here, "..", "..", "proto"), out)
    print(f"generated switchyard.v1 stubs in {os.path.join(out, 'switchyard', 'v1')}", file=sys.stderr)
