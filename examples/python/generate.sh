#!/bin/sh
# Generates the Python gRPC stubs for proto/switchyard/v1/queue.proto.
#
#   examples/python/generate.sh [OUT_DIR]
#
# OUT_DIR defaults to examples/python/gen (gitignored: stubs are build output,
# and must match the grpc_tools/protobuf versions of the interpreter that runs
# them, so they are generated where they are used, never committed).
# The interpreter is $PYTHON, default /usr/bin/python3 (Debian's python3-grpcio
# and python3-grpc-tools).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-/usr/bin/python3}
out=${1:-$here/gen}

# queue.proto imports google/protobuf/{duration,timestamp}.proto: grpc_tools
# ships those in its _proto folder, which protoc does not search by itself.
include=$("$python" -c 'import os, grpc_tools; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
if [ ! -f "$include/google/protobuf/duration.proto" ]; then
  echo "generate.sh: $include has no google/protobuf/duration.proto; is grpc_tools installed properly?" >&2
  exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
# Run from the repository root with paths relative to -I proto, so the stubs
# import each other as switchyard.v1.queue_pb2, as the proto package says.
cd "$root"
"$python" -m grpc_tools.protoc -I proto -I "$include" \
  --python_out="$out" --grpc_python_out="$out" \
  proto/switchyard/v1/queue.proto
echo "generated Python stubs in $out" >&2
