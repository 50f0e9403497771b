"""The generated stubs, and what to do when they are missing.

The stubs are build output (setup.py's build_py); in a checkout, run
`python3 build_stubs.py` in clients/python first.
"""

try:
    from .v1 import queue_pb2 as pb, queue_pb2_grpc as pb_grpc
    from .v1 import cron_pb2_grpc as cron_grpc
except ImportError as err:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "switchyard.v1 stubs are missing: install the package (pip install --no-build-isolation "
        "clients/python) or, in a checkout, run `python3 build_stubs.py` in clients/python"
    ) from err


__all__ = ["pb", "pb_grpc", "cron_grpc"]
