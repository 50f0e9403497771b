#!/usr/bin/python3
"""A Switchyard producer in Python, on plain grpcio: Enqueue over one EnqueueStream.

    producer.py --address HOST:PORT --items N QUEUE [QUEUE ...]

Sends one Enqueue request of N items (payloads "<queue> <i>") per QUEUE named,
all on one EnqueueStream, without waiting for each answer; then half-closes the
stream, waits for it to end, and prints one JSON line: per request, its queue
and either its ids or its status (code name and message). A request that fails
(an undeclared queue, say) fails alone; the others are written.

A unary Enqueue call pays for its HTTP/2 headers and trailers; a message on an
open stream does not, so a producer that enqueues often keeps one stream open
and matches answers to requests by id. `EnqueueStream` below does that and can
be kept for the life of the process.

The stubs come from examples/python/generate.sh (see stubs.py).
"""

import argparse
import json
import os
import queue
import threading
from concurrent.futures import Future

from stubs import grpc, pb, pb_grpc


class EnqueueFailed(Exception):
    """One request's own status: the stream goes on."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


_CODES = {c.value[0]: c for c in grpc.StatusCode}
_END = object()


class EnqueueStream:
    """One EnqueueStream call. enqueue() returns a Future of the request's ids.

    grpcio takes the requests from an iterator (a generator fed by a
    queue.Queue, so the stream stays open until close()), and a thread reads
    the responses and settles each request's Future by id.
    """

    def __init__(self, stub):
        self._requests = queue.Queue()
        self._pending = {}
        self._lock = threading.Lock()
        self._next_id = 1
        self._call = stub.EnqueueStream(self._request_iterator())
        self.ended = Future()  # the stream's final status code
        threading.Thread(target=self._read, name="enqueue-reader", daemon=True).start()

    def _request_iterator(self):
        while True:
            request = self._requests.get()
            if request is _END:
                return  # half-closes the stream: the server answers what it read, then ends it
            yield request

    def _read(self):
        code, message = grpc.StatusCode.OK, ""
        try:
            for response in self._call:
                with self._lock:
                    future = self._pending.pop(response.id, None)
                if future is None:
                    continue
                if response.code == 0:
                    future.set_result(list(response.ids))
                else:
                    future.set_exception(EnqueueFailed(_CODES.get(response.code, grpc.StatusCode.UNKNOWN), response.message))
        except grpc.RpcError as err:
            code, message = err.code(), err.details()
        # Unanswered at an OK end: never read, safe to send again. Otherwise: unknown, as for a cut-off unary call.
        with self._lock:
            unanswered, self._pending = self._pending, {}
        for future in unanswered.values():
            future.set_exception(EnqueueFailed(code if code != grpc.StatusCode.OK else grpc.StatusCode.UNAVAILABLE, message or "the stream ended first; send again"))
        self.ended.set_result(code)

    def enqueue(self, queue_name, payloads):
        """Sends one Enqueue request; the Future resolves to its ids or raises EnqueueFailed."""
        future = Future()
        with self._lock:
            request_id = self._next_id
            self._next_id = self._next_id % 0xFFFFFFFF + 1
            self._pending[request_id] = future
        items = [pb.EnqueueItem(payload=p) for p in payloads]
        self._requests.put(pb.EnqueueStreamRequest(id=request_id, request=pb.EnqueueRequest(queue=queue_name, items=items)))
        return future

    def close(self, timeout=30.0):
        """Half-closes the stream and waits until the server has answered everything and ended it."""
        self._requests.put(_END)
        return self.ended.result(timeout=timeout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:50051")
    parser.add_argument("--items", type=int, default=3)
    parser.add_argument("--token", default=os.environ.get("SWITCHYARD_TOKEN", ""))
    parser.add_argument("queues", nargs="+")
    args = parser.parse_args()

    with grpc.insecure_channel(args.address) as channel:
        if args.token:
            channel = grpc.intercept_channel(channel, _Bearer(args.token))
        stream = EnqueueStream(pb_grpc.QueueServiceStub(channel))
        futures = [(q, stream.enqueue(q, [f"{q} {i}".encode() for i in range(args.items)])) for q in args.queues]
        results = []
        for q, future in futures:
            try:
                results.append({"queue": q, "ids": future.result(timeout=30)})
            except EnqueueFailed as err:
                results.append({"queue": q, "code": err.code.name, "message": err.message})
        code = stream.close()
    print(json.dumps({"stream_status": code.name, "results": results}), flush=True)


class _Bearer(grpc.StreamStreamClientInterceptor):
    """Sends `authorization: Bearer <token>` on the stream."""

    def __init__(self, token):
        self._token = token

    def intercept_stream_stream(self, continuation, details, request_iterator):
        metadata = list(details.metadata or []) + [("authorization", f"Bearer {self._token}")]
        return continuation(details._replace(metadata=metadata), request_iterator)


if __name__ == "__main__":
    main()
