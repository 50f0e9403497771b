"""Messages the client and the Worker build: items, replies, durations, settles."""

import datetime

from google.protobuf.duration_pb2 import Duration

from ._proto import has_field, pb


class Item:
    """An item to enqueue: a payload (bytes, or str as UTF-8) and optional headers.

    `idempotency_key` (a repeated enqueue with the same key adds nothing), `delay` (seconds
    or a timedelta) and `not_before` (a datetime) need a server and stubs whose proto has
    them; with older stubs, giving one raises ValueError rather than enqueue without it.
    """

    __slots__ = ("payload", "headers", "idempotency_key", "delay", "not_before")

    def __init__(self, payload, headers=None, *, idempotency_key=None, delay=None, not_before=None):
        self.payload = payload
        self.headers = headers or {}
        self.idempotency_key = idempotency_key
        self.delay = delay
        self.not_before = not_before


class Reply:
    """Items to enqueue onto `queue` with an ack (the handler's return value)."""

    __slots__ = ("queue", "items", "ttl")

    def __init__(self, queue, items, ttl=None):
        self.queue = queue
        self.items = items
        self.ttl = ttl


def _bytes(payload):
    return payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)


def enqueue_item(item):
    """A pb.EnqueueItem from bytes, str or Item."""
    if not isinstance(item, Item):
        return pb.EnqueueItem(payload=_bytes(item))
    message = pb.EnqueueItem(payload=_bytes(item.payload), headers=item.headers)
    later = {"idempotency_key": item.idempotency_key, "delay": duration(item.delay), "not_before": item.not_before}
    for name, value in later.items():
        if value is None:
            continue
        if not has_field(pb.EnqueueItem, name):
            raise ValueError(f"EnqueueItem.{name} is not in this package's proto: rebuild it from a Switchyard proto that has it")
        if name == "not_before":
            message.not_before.FromDatetime(value)
        elif name == "delay":
            message.delay.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def duration(value):
    """A google.protobuf.Duration from seconds (int or float) or a timedelta; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if value < 0:
        raise ValueError(f"a duration must not be negative, not {value}")
    d = Duration()
    d.FromNanoseconds(int(round(value * 1e9)))
    return d


def reply_fields(reply):
    """The AckRequest fields that carry a Reply."""
    if reply is None:
        return {}
    fields = {"reply_queue": reply.queue, "replies": [enqueue_item(i) for i in reply.items]}
    if reply.ttl is not None:
        fields["reply_ttl"] = duration(reply.ttl)
    return fields


def settle_request(message_class, lease_token, **optional):
    """A settle message; optional fields this proto does not have yet are left out."""
    fields = {k: v for k, v in optional.items() if v not in (None, "") and has_field(message_class, k)}
    return message_class(lease_token=lease_token, **fields)


def ack(lease_token, reply=None):
    """A LeaseRequest acking a delivery, with a Reply's items if any."""
    return pb.LeaseRequest(ack=pb.AckRequest(lease_token=lease_token, **reply_fields(reply)))


def retry(lease_token, reason="", delay=None):
    """A LeaseRequest retrying a delivery (reason and delay where the proto has them)."""
    return pb.LeaseRequest(retry=settle_request(pb.RetryRequest, lease_token, reason=reason, delay=duration(delay)))


def drop(lease_token, reason=""):
    """A LeaseRequest dropping a delivery (reason where the proto has it)."""
    return pb.LeaseRequest(drop=settle_request(pb.DropRequest, lease_token, reason=reason))
