"""A client of switchyard.v1.QueueService: enqueue, queue administration, unary settles,
and raw Lease streams (the Worker in worker.py runs those for you)."""

import grpc

from ._proto import cron_grpc, pb, pb_grpc
from .errors import Error
from .lease import LeaseStream
from .messages import duration, enqueue_item, reply_fields, retry_request

# The server sends messages up to SWITCHYARD_MAX_MESSAGE_BYTES (64 MiB by default); gRPC
# clients refuse more than 4 MiB unless told otherwise (docs/worker-protocol.md §1).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_DEFAULT_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # A ping every 30 s finds a dead connection; the server takes one per 10 s at most.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # After a server restart, try its address again within 5 s (gRPC's default grows to 120 s).
    ("grpc.max_reconnect_backoff_ms", 5_000),
)

_MODES = {"simple": pb.QUEUE_MODE_SIMPLE, "reliable": pb.QUEUE_MODE_RELIABLE}
_LISTS = {"ready": pb.QUEUE_LIST_READY, "dead_letter": pb.QUEUE_LIST_DEAD_LETTER}


class Client:
    """One channel to Switchyard and the calls made on it.

    `address` is host:port. `credentials` (grpc.ssl_channel_credentials(...)) makes the
    channel TLS; `token` is sent as `authorization: Bearer <token>` on every call, Lease
    streams included; `timeout` is each unary call's deadline in seconds.
    """

    def __init__(self, address, *, token=None, credentials=None, timeout=30.0, options=()):
        merged = dict(_DEFAULT_OPTIONS)
        merged.update(dict(options))
        opts = list(merged.items())
        # Announced when a Lease stream opens: the server keeps each delivery message within it
        # (-1, no limit, announces the most a uint32 holds; 0 means gRPC's default of 4 MiB).
        receive = merged["grpc.max_receive_message_length"]
        self.receive_limit = 0xFFFFFFFF if receive < 0 else min(receive, 0xFFFFFFFF)
        self.channel = (
            grpc.secure_channel(address, credentials, opts) if credentials else grpc.insecure_channel(address, opts)
        )
        self.queues = pb_grpc.QueueServiceStub(self.channel)
        #: CronService (switchyard.v1.cron_pb2 has its messages), for callers who need it.
        self.cron = cron_grpc.CronServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as err:
            raise Error.from_rpc(err) from err

    # Producers

    def enqueue(self, queue, items, *, ttl=None, min_replicas=0, replica_timeout=None):
        """Pushes items (bytes, str or Item) onto a declared queue in order; returns their ids.

        After UNAVAILABLE or a deadline the items may have been written: sending them again
        enqueues them twice, unless each Item has an idempotency_key (docs/worker-protocol.md §9).
        """
        request = pb.EnqueueRequest(
            queue=queue,
            items=[enqueue_item(i) for i in items],
            ttl=duration(ttl),
            min_replicas=min_replicas,
            replica_timeout=duration(replica_timeout),
        )
        return list(self._call(self.queues.Enqueue, request).ids)

    # Administration

    def create_queue(self, name, mode="reliable", *, processing_list="", recovery_set="", min_idle=None,
                     recovery_ttl=None, max_deliveries=0, dead_letter_list=""):
        """Declares a queue (again with the same options: a no-op); returns the stored declaration."""
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
        queue = pb.Queue(
            name=name,
            mode=_MODES[mode],
            processing_list=processing_list,
            recovery_set=recovery_set,
            min_idle=duration(min_idle),
            recovery_ttl=duration(recovery_ttl),
            max_deliveries=max_deliveries,
            dead_letter_list=dead_letter_list,
        )
        return self._call(self.queues.CreateQueue, pb.CreateQueueRequest(queue=queue)).queue

    def get_queue(self, name):
        return self._call(self.queues.GetQueue, pb.GetQueueRequest(name=name)).queue

    def list_queues(self, page_size=100):
        """Every declaration, in name order, fetched a page at a time."""
        token = ""
        while True:
            page = self._call(self.queues.ListQueues, pb.ListQueuesRequest(page_size=page_size, page_token=token))
            yield from page.queues
            token = page.next_page_token
            if not token:
                return

    def delete_queue(self, name, *, purge=False):
        self._call(self.queues.DeleteQueue, pb.DeleteQueueRequest(name=name, purge=purge))

    def queue_stats(self, name):
        """A pb.QueueStats: ready, processing, dead_letter, oldest_claim_age, ..."""
        return self._call(self.queues.GetQueueStats, pb.GetQueueStatsRequest(name=name)).stats

    def peek(self, name, list="ready", limit=0):
        """Items of the ready or dead_letter list, next to leave first, without moving them."""
        if list not in _LISTS:
            raise ValueError(f"list must be one of {', '.join(_LISTS)}, not {list!r}")
        return self._call(self.queues.PeekQueue, pb.PeekQueueRequest(name=name, list=_LISTS[list], limit=limit))

    def purge(self, name):
        """Deletes the waiting items; returns how many."""
        return self._call(self.queues.PurgeQueue, pb.PurgeQueueRequest(name=name)).purged

    def requeue_dead_letters(self, name, ids=None):
        """Moves dead letters (these ids, or all when ids is None) back onto the queue; returns how many."""
        request = pb.RequeueDeadLettersRequest(name=name, all=ids is None, ids=ids or [])
        return self._call(self.queues.RequeueDeadLetters, request).requeued

    def delete_dead_letters(self, name, ids=None):
        """Deletes dead letters (these ids, or all when ids is None); returns how many."""
        request = pb.DeleteDeadLettersRequest(name=name, all=ids is None, ids=ids or [])
        return self._call(self.queues.DeleteDeadLetters, request).deleted

    # Settles by lease token, on any instance

    def ack(self, lease_token, reply=None):
        """Acknowledges a delivery (enqueuing the Reply's items first, if any); returns the reply ids."""
        request = pb.AckRequest(lease_token=lease_token, **reply_fields(reply))
        return list(self._call(self.queues.Ack, request).reply_ids)

    def retry(self, lease_token, reason="", delay=None):
        """Returns a delivery to the queue; True when it went to the dead-letter list instead.

        `reason` comes back as the next delivery's last_error; `delay` (seconds) holds the
        next delivery back that long instead of the queue's retry policy.
        """
        return self._call(self.queues.Retry, retry_request(lease_token, reason, delay)).dead_lettered

    def drop(self, lease_token, reason=""):
        self._call(self.queues.Drop, pb.DropRequest(lease_token=lease_token, reason=reason[:1000]))

    def extend(self, lease_token):
        """Restarts a delivery's claim; returns when the watchdog may next recover it (None without a recovery set)."""
        response = self._call(self.queues.ExtendLease, pb.ExtendLeaseRequest(lease_token=lease_token))
        return response.expire_time.ToDatetime() if response.HasField("expire_time") else None

    # Streams

    def lease(self, queue, credit, group=""):
        """Opens a raw Lease stream (see lease.py; `group`: a STREAM queue's consumer group); Worker runs one for you."""
        return LeaseStream(self.queues, queue, credit, self.metadata, self.receive_limit, group)
