"""Messages the client and the Worker build: items, replies, durations, settles."""

import datetime

from google.protobuf.duration_pb2 import Duration

from ._proto import pb


class Item:
    """An item to enqueue: a payload (bytes, or str as UTF-8) and optional headers.

    `idempotency_key`: another enqueue with the same key onto the same queue within its
    idempotency window adds nothing and answers the first item's id. `delay` (seconds or a
    timedelta) or `not_before` (an aware datetime) holds the item back until then.
    """

    __slots__ = ("payload", "headers", "idempotency_key", "delay", "not_before")

    def __init__(self, payload, headers=None, *, idempotency_key="", delay=None, not_before=None):
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
    message = pb.EnqueueItem(
        payload=_bytes(item.payload), headers=item.headers, idempotency_key=item.idempotency_key, delay=duration(item.delay)
    )
    if item.not_before is not None:
        message.not_before.FromDatetime(item.not_before)
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


def ack(lease_token, reply=None):
    """A LeaseRequest acking a delivery, with a Reply's items if any."""
    return pb.LeaseRequest(ack=pb.AckRequest(lease_token=lease_token, **reply_fields(reply)))


def retry_request(lease_token, reason="", delay=None):
    """A RetryRequest: `reason` travels with the item; `delay` (seconds) overrides the queue's retry policy."""
    return pb.RetryRequest(lease_token=lease_token, reason=reason[:1000], delay=duration(delay))


def retry(lease_token, reason="", delay=None):
    """A LeaseRequest retrying a delivery."""
    return pb.LeaseRequest(retry=retry_request(lease_token, reason, delay))


def drop(lease_token, reason=""):
    """A LeaseRequest dropping a delivery."""
    return pb.LeaseRequest(drop=pb.DropRequest(lease_token=lease_token, reason=reason[:1000]))
