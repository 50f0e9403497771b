"""The one error type of the package: a gRPC status with the server's message."""

import grpc


class Error(Exception):
    """A call failed. `code` is a grpc.StatusCode; `details` says what to fix."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc(cls, err):
        """The Error for a grpc.RpcError (the RpcError becomes its __cause__ when raised `from` it)."""
        return cls(err.code(), err.details() or "")


# Stream ends after which reconnecting cannot help: the worker or its configuration is
# wrong (docs/worker-protocol.md §4). Every other status is worth another attempt.
FATAL = frozenset(
    {
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
