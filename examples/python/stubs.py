"""grpc and the generated switchyard.v1 stubs for the examples, or an exit that says what to install.

The stubs come from examples/python/generate.sh: they are found on PYTHONPATH,
or else in examples/python/gen.
"""

import os
import sys

_me = os.path.basename(sys.argv[0])

try:
    import grpc
except ImportError:
    sys.exit(f"{_me}: cannot import grpc; install python3-grpcio (apt) or grpcio (pip)")

try:
    from switchyard.v1 import queue_pb2 as pb, queue_pb2_grpc as pb_grpc
except ImportError:
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))
    try:
        from switchyard.v1 import queue_pb2 as pb, queue_pb2_grpc as pb_grpc
    except ImportError:
        sys.exit(f"{_me}: no Python stubs for switchyard.v1; run examples/python/generate.sh first")

__all__ = ["grpc", "pb", "pb_grpc"]
