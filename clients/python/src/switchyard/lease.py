"""One raw Lease stream (docs/worker-protocol.md §2): what Worker runs, for callers who
want to drive the protocol themselves."""

import queue

import grpc

from . import messages
from ._proto import pb

# Acks gathered into one ack_batch message at most.
MAX_ACK_BATCH = 1000


class _End:
    """Ends the request side (a half-close) when it reaches the front of the send queue."""


def _plain_ack(request):
    return request is not _End and request.WhichOneof("kind") == "ack" and not request.ack.replies


class LeaseStream:
    """A Lease call whose request side is fed from a queue.

    grpcio reads a stream's requests from an iterator and half-closes when it ends, and
    the server answers a half-close by returning every unsettled item: so the iterator
    blocks on a queue until close(). Settles may be sent from any thread. When the
    server said `ack_batches`, acks without replies waiting in the queue together go out
    as one ack_batch, in their place in the order (no timer: a lone ack goes at once).
    """

    def __init__(self, stub, queue_name, credit, metadata=(), max_message_bytes=0, group=""):
        """`max_message_bytes` is the channel's receive limit (0: gRPC's default, 4 MiB): the
        server keeps each delivery message within it. A STREAM queue's open names the
        consumer `group` to read as."""
        self._requests = queue.Queue()
        self._batch_acks = False
        self.queue = queue_name
        open_ = pb.LeaseOpen(queue=queue_name, credit=credit, max_message_bytes=max_message_bytes, group=group)
        self._requests.put(pb.LeaseRequest(open=open_))
        self.call = stub.Lease(self._iterator(), metadata=metadata)

    def _iterator(self):
        held = None
        while True:
            request = held if held is not None else self._requests.get()
            held = None
            if request is _End:
                return
            if self._batch_acks and _plain_ack(request):
                tokens = [request.ack.lease_token]
                while len(tokens) < MAX_ACK_BATCH:
                    try:
                        following = self._requests.get_nowait()
                    except queue.Empty:
                        break
                    if not _plain_ack(following):
                        held = following
                        break
                    tokens.append(following.ack.lease_token)
                if len(tokens) > 1:
                    request = pb.LeaseRequest(ack_batch=pb.LeaseAckBatch(lease_tokens=tokens))
            yield request

    def responses(self):
        """The server's LeaseResponses until the stream ends; raises grpc.RpcError on an error status.

        Leaving this iteration early changes nothing: the stream stays open.
        """
        try:
            for response in self.call:
                if response.WhichOneof("kind") == "opened":
                    self._batch_acks = response.opened.ack_batches
                yield response
        except grpc.RpcError:
            self._requests.put(_End)
            raise
        # grpcio stops reading the request iterator once the call is over; unblock it so its thread ends.
        self._requests.put(_End)

    def send(self, request):
        """Queues a LeaseRequest behind the ones sent before."""
        self._requests.put(request)

    def ack(self, lease_token, reply=None):
        self.send(messages.ack(lease_token, reply))

    def retry(self, lease_token, reason="", delay=None):
        self.send(messages.retry(lease_token, reason, delay))

    def drop(self, lease_token, reason=""):
        self.send(messages.drop(lease_token, reason))

    def set_credit(self, credit):
        self.send(pb.LeaseRequest(credit=pb.LeaseCredit(credit=credit)))

    def extend(self, lease_token):
        self.send(pb.LeaseRequest(extend=pb.ExtendLeaseRequest(lease_token=lease_token)))

    def close(self):
        """Half-closes once everything queued is sent; the server then applies it and ends the stream."""
        self._requests.put(_End)

    def cancel(self):
        """Ends the call at once, as a lost connection would: the server returns the items it held."""
        self._requests.put(_End)
        self.call.cancel()
