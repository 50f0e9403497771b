"""The one error type of the package: a gRPC status with the server's message and reason."""

import grpc

#: google.rpc.ErrorInfo.domain of every error Switchyard sends.
ERROR_DOMAIN = "switchyard.v1"
_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


class Error(Exception):
    """A call failed. `code` is a grpc.StatusCode; `details` says what to fix; `reason` says
    why, for code to branch on: an ErrorReason name of errors.proto without its prefix (e.g.
    "QUEUE_NOT_FOUND", "LEASE_SUPERSEDED"), "" when the status carries none (one made by
    gRPC itself, or by a proxy); `metadata` holds facts about it (e.g. {"queue": "{x}"})."""

    def __init__(self, code, details, reason="", metadata=None):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.reason = reason
        self.metadata = dict(metadata or {})

    @classmethod
    def from_rpc(cls, err):
        """The Error for a grpc.RpcError (the RpcError becomes its __cause__ when raised `from` it)."""
        reason, metadata = error_info(err.trailing_metadata())
        return cls(err.code(), err.details() or "", reason, metadata)


def error_info(trailing_metadata):
    """(reason, metadata) of the google.rpc.ErrorInfo in a status's grpc-status-details-bin
    trailer (a google.rpc.Status), or ("", {}) when there is none. Read by hand, three small
    messages of googleapis, so the package needs no googleapis stubs of its own (which would
    clash with googleapis-common-protos in the same process)."""
    for key, value in trailing_metadata or ():
        if key != _DETAILS_KEY:
            continue
        try:
            for number, any_bytes in _fields(value):
                if number != 3:  # Status.details: google.protobuf.Any
                    continue
                any_fields = dict(_fields(any_bytes))
                if any_fields.get(1, b"").decode() != _ERROR_INFO:
                    continue
                reason, domain, metadata = "", "", {}
                for n, v in _fields(any_fields.get(2, b"")):
                    if n == 1:
                        reason = v.decode()
                    elif n == 2:
                        domain = v.decode()
                    elif n == 3:
                        entry = dict(_fields(v))
                        metadata[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
                if domain == ERROR_DOMAIN:
                    return reason, metadata
        except (ValueError, UnicodeDecodeError, AttributeError):
            return "", {}
    return "", {}


def _fields(data):
    """(field number, value) of a protobuf message's fields: ints for varints, bytes otherwise."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = bytes(data[pos : pos + length]), pos + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = bytes(data[pos : pos + size]), pos + size
        else:
            raise ValueError(f"wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated")
        yield number, value


def _varint(data, pos):
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("malformed varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


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
