#!/usr/bin/python3
"""A Switchyard worker in Python, on plain grpcio.

Two modes:

  --tour      Enqueues six items, leases them on one Lease stream and settles
              them every way the API allows: ack, retry, drop and extend on the
              stream, then ExtendLease, Ack, Retry and Drop as unary RPCs with
              the lease token. Prints one JSON summary line on stdout and exits 0.
              Expects a fresh, already declared RELIABLE queue.

  --hold N    Leases N items with credit N, prints "HOLDING <n> <id,id,...> <token,token,...>"
              once it holds them all, then sleeps until killed without settling
              anything (to show what happens to a crashed worker's items).

  --work N    Leases N items with credit N, settles each with --settle (ack,
              retry or drop; unary RPCs, so each outcome is known), closes the
              stream, and prints one JSON line: the deliveries (headers too,
              so a traceparent from the producer shows) and each settle's outcome.

  --group G   STREAM queues: the consumer group --hold and --work read as
              (e.g. --queue uploads --group thumbnailer).
  --reply-queue Q [--reply-ttl S]
              --work with --settle ack: each ack replies with the delivery's
              payload onto Q (the seed's uploads -> {thumbnails} route), with
              a publish TTL of S seconds.

Everything but the summary / HOLDING line goes to stderr.

The stubs come from examples/python/generate.sh (see stubs.py).
"""

import argparse
import json
import queue
import sys
import threading

from stubs import grpc, pb, pb_grpc

# How long to wait for any one thing the server should send (seconds).
DEFAULT_TIMEOUT = 30.0


def log(*parts):
    print("worker.py:", *parts, file=sys.stderr, flush=True)


class WorkerError(Exception):
    """The server did something the tour did not expect."""


class _End:
    """Marks the end of a request or response stream in a queue.Queue."""


class LeaseStream:
    """One Lease call, with a request side we write to and a response side we read from.

    grpcio takes a Lease call's requests from an iterator and half-closes the
    stream when the iterator ends. Switchyard answers a half-close by ending the
    stream and returning every unsettled item to the queue, so the iterator must
    stay open for as long as we hold items: it is a generator fed by a
    queue.Queue, which blocks until we send something or close().

    Responses are read by a thread into another queue.Queue, so that waiting for
    one can time out (iterating the call directly would block without a limit).
    """

    def __init__(self, stub, queue_name, credit, group=""):
        self._requests = queue.Queue()
        self._responses = queue.Queue()
        # The first message must be open {queue, credit} (and, for a STREAM queue, the group).
        self.send(pb.LeaseRequest(open=pb.LeaseOpen(queue=queue_name, credit=credit, group=group)))
        self._call = stub.Lease(self._request_iterator())
        self._reader = threading.Thread(target=self._read, name="lease-reader", daemon=True)
        self._reader.start()

    def _request_iterator(self):
        while True:
            request = self._requests.get()
            if request is _End:
                return  # half-closes the request stream
            yield request

    def _read(self):
        try:
            for response in self._call:
                self._responses.put(response)
            self._responses.put(_End)
        except grpc.RpcError as err:  # the stream ended with an error status
            self._responses.put(err)

    def send(self, request):
        self._requests.put(request)

    def receive(self, timeout):
        """The next LeaseResponse, or None once the stream ended cleanly."""
        try:
            item = self._responses.get(timeout=timeout)
        except queue.Empty:
            raise WorkerError(f"nothing from the server on the Lease stream for {timeout}s") from None
        if item is _End:
            return None
        if isinstance(item, grpc.RpcError):
            raise WorkerError(f"Lease stream failed: {item.code().name}: {item.details()}")
        return item

    def close(self):
        """Half-closes the request stream; the server then ends the call."""
        self._requests.put(_End)

    def cancel(self):
        """Ends the call at once, as a lost connection would; the server returns our items."""
        self._requests.put(_End)
        self._call.cancel()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.cancel()


def delivery_json(d):
    return {
        "id": d.id,
        "lease_token": d.lease_token,
        "fence": d.fence,
        "payload": d.payload.decode("utf-8", "replace"),
        "headers": dict(d.headers),
        "delivery_count": d.delivery_count,
        "queue": d.queue,
        "enqueue_time_ms": d.enqueue_time.ToMilliseconds() if d.HasField("enqueue_time") else None,
    }


def settle_result_json(r):
    return {
        "lease_token": r.lease_token,
        "code": r.code,
        "message": r.message,
        "has_expire_time": r.HasField("expire_time"),
    }


def wait_for_opened(lease, timeout):
    response = lease.receive(timeout)
    if response is None or response.WhichOneof("kind") != "opened":
        raise WorkerError(f"expected `opened` as the first response, got {response}")
    return response.opened


class Others:
    """Tallies the responses a step was not waiting for (heartbeats, anything else)."""

    def __init__(self):
        self.heartbeats = 0
        self.unexpected = []

    def note(self, response):
        kind = response.WhichOneof("kind")
        if kind == "heartbeat":
            self.heartbeats += 1
        else:
            self.unexpected.append(kind)


def tour(stub, args):
    # 1. Enqueue six items; the server gives back one id per item, in order.
    items = [
        pb.EnqueueItem(payload=f"tour-{n}".encode(), headers={"origin": "python-tour", "n": str(n)})
        for n in range(1, 7)
    ]
    ids = list(stub.Enqueue(pb.EnqueueRequest(queue=args.queue, items=items), timeout=args.timeout).ids)
    log("enqueued", len(ids), "items")
    summary = {"queue": args.queue, "enqueued": ids}
    others = Others()
    # 2.-5. Lease, settle, close.
    with LeaseStream(stub, args.queue, credit=len(ids)) as lease:
        summary.update(lease_and_settle(stub, lease, ids, others, args.timeout))
    summary["heartbeats"] = others.heartbeats
    summary["unexpected"] = others.unexpected
    print(json.dumps(summary), flush=True)


def lease_and_settle(stub, lease, ids, others, timeout):
    """The tour's Lease stream: takes the six items and settles each a different way."""
    out = {}
    # 2. Take all six: the stream was opened with credit 6, so all six come at once.
    opened = wait_for_opened(lease, timeout)
    out["opened"] = {
        "queue": opened.queue,
        "mode": pb.QueueMode.Name(opened.mode),
        "heartbeat_interval_ms": opened.heartbeat_interval.ToMilliseconds(),
    }
    deliveries = []
    while len(deliveries) < len(ids):
        response = lease.receive(timeout)
        if response is None:
            raise WorkerError(f"Lease stream ended after {len(deliveries)} deliveries")
        if response.WhichOneof("kind") == "deliveries":
            deliveries.extend(response.deliveries.deliveries)
        else:
            others.note(response)
    out["deliveries"] = [delivery_json(d) for d in deliveries]
    if sorted(d.id for d in deliveries) != sorted(ids):
        raise WorkerError("the deliveries are not the items the tour enqueued; run the tour on a fresh queue")

    # Pause deliveries: every settle frees a unit of credit, and without this
    # the items we retry would come straight back to us on this stream.
    lease.send(pb.LeaseRequest(credit=pb.LeaseCredit(credit=0)))

    # 3. Settle on the stream. Successful acks, retries and drops are not
    # echoed; extends are, and so are failures.
    d_ack, d_retry, d_drop, d_unary_ack, d_unary_retry, d_unary_drop = deliveries
    lease.send(pb.LeaseRequest(ack=pb.AckRequest(lease_token=d_ack.lease_token)))
    lease.send(pb.LeaseRequest(retry=pb.RetryRequest(lease_token=d_retry.lease_token)))
    lease.send(pb.LeaseRequest(drop=pb.DropRequest(lease_token=d_drop.lease_token)))
    lease.send(pb.LeaseRequest(extend=pb.ExtendLeaseRequest(lease_token=d_unary_ack.lease_token)))
    # Acking the same delivery twice fails (FAILED_PRECONDITION: no longer
    # held), and that failure is echoed. The server applies a stream's settles
    # in order, so once this echo is back the settles above are in Redis too.
    lease.send(pb.LeaseRequest(ack=pb.AckRequest(lease_token=d_ack.lease_token)))
    out["stream"] = {
        "acked": [d_ack.lease_token],
        "retried": [d_retry.lease_token],
        "dropped": [d_drop.lease_token],
        "extended": [d_unary_ack.lease_token],
        "acked_twice": [d_ack.lease_token],
    }
    results = []
    while len(results) < 2:  # the extend's result and the second ack's failure
        response = lease.receive(timeout)
        if response is None:
            raise WorkerError("Lease stream ended while waiting for settle results")
        if response.WhichOneof("kind") == "settle_result":
            results.append(settle_result_json(response.settle_result))
        else:
            others.note(response)
    out["settle_results"] = results

    # 4. Settle with unary RPCs. A lease token works on any instance and
    # outside its stream; here it also frees this stream's credit.
    extended = stub.ExtendLease(pb.ExtendLeaseRequest(lease_token=d_unary_retry.lease_token), timeout=timeout)
    stub.Ack(pb.AckRequest(lease_token=d_unary_ack.lease_token), timeout=timeout)
    retried = stub.Retry(pb.RetryRequest(lease_token=d_unary_retry.lease_token), timeout=timeout)
    stub.Drop(pb.DropRequest(lease_token=d_unary_drop.lease_token), timeout=timeout)
    out["unary"] = {
        "extended": [d_unary_retry.lease_token],
        "extend_has_expire_time": extended.HasField("expire_time"),
        "acked": [d_unary_ack.lease_token],
        "retried": [d_unary_retry.lease_token],
        "retry_dead_lettered": retried.dead_lettered,
        "dropped": [d_unary_drop.lease_token],
    }

    # A unary settle of a delivery that was already retried fails with a status.
    errors = []
    try:
        stub.Ack(pb.AckRequest(lease_token=d_retry.lease_token), timeout=timeout)
    except grpc.RpcError as err:
        errors.append({"rpc": "Ack", "lease_token": d_retry.lease_token, "code": err.code().name, "details": err.details()})
    out["errors"] = errors

    # 5. Done: half-close, and read until the server ends the stream. We hold
    # nothing now, so nothing goes back to the queue.
    lease.close()
    while True:
        response = lease.receive(timeout)
        if response is None:
            break
        others.note(response)
    out["stream_ended"] = True
    return out


def hold(stub, args):
    n = args.hold
    with LeaseStream(stub, args.queue, credit=n, group=args.group) as lease:
        hold_items(lease, n, args.timeout)


def hold_items(lease, n, timeout):
    wait_for_opened(lease, timeout)
    held = []
    while len(held) < n:
        response = lease.receive(timeout)
        if response is None:
            raise WorkerError(f"Lease stream ended after {len(held)} of {n} deliveries")
        if response.WhichOneof("kind") == "deliveries":
            held.extend(response.deliveries.deliveries)
    # Items pushed raw by another Redis client have no id: they show as "".
    print(f"HOLDING {len(held)} {','.join(d.id for d in held)} {','.join(d.lease_token for d in held)}", flush=True)
    log(f"holding {len(held)} items without settling them; kill me")
    # Sleep with the stream open (the request iterator stays blocked, so the
    # stream is not half-closed) until killed. The reader thread keeps taking
    # heartbeats meanwhile.
    threading.Event().wait()


def work(stub, args):
    n = args.work
    out = {"queue": args.queue, "settle": args.settle}
    with LeaseStream(stub, args.queue, credit=n, group=args.group) as lease:
        wait_for_opened(lease, args.timeout)
        deliveries = []
        while len(deliveries) < n:
            response = lease.receive(args.timeout)
            if response is None:
                raise WorkerError(f"Lease stream ended after {len(deliveries)} of {n} deliveries")
            if response.WhichOneof("kind") == "deliveries":
                deliveries.extend(response.deliveries.deliveries)
        # Take nothing more while settling: a retried item would come straight back.
        lease.send(pb.LeaseRequest(credit=pb.LeaseCredit(credit=0)))
        settled = []
        for d in deliveries:
            entry = delivery_json(d)
            if args.settle == "ack" and args.reply_queue:
                ack = pb.AckRequest(lease_token=d.lease_token, replies=[pb.EnqueueItem(payload=d.payload)], reply_queue=args.reply_queue)
                if args.reply_ttl:
                    ack.reply_ttl.FromMilliseconds(int(args.reply_ttl * 1000))
                entry["reply_ids"] = list(stub.Ack(ack, timeout=args.timeout).reply_ids)
            elif args.settle == "ack":
                stub.Ack(pb.AckRequest(lease_token=d.lease_token), timeout=args.timeout)
            elif args.settle == "retry":
                entry["dead_lettered"] = stub.Retry(pb.RetryRequest(lease_token=d.lease_token), timeout=args.timeout).dead_lettered
            else:
                stub.Drop(pb.DropRequest(lease_token=d.lease_token), timeout=args.timeout)
            settled.append(entry)
        out["deliveries"] = settled
        lease.close()
        while lease.receive(args.timeout) is not None:
            pass
    print(json.dumps(out), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True, help="Switchyard's gRPC address, host:port")
    parser.add_argument("--queue", required=True, help="a declared queue")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for any one answer (default {DEFAULT_TIMEOUT:g})")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--tour", action="store_true", help="enqueue, lease and settle six items every way; print a JSON summary")
    mode.add_argument("--hold", type=int, metavar="N", help="lease N items, print HOLDING, then sleep until killed")
    mode.add_argument("--work", type=int, metavar="N", help="lease N items, settle each with --settle, print a JSON summary")
    parser.add_argument("--settle", choices=["ack", "retry", "drop"], default="ack", help="how --work settles (default ack)")
    parser.add_argument("--group", default="", help="STREAM queues: the consumer group to read as")
    parser.add_argument("--reply-queue", default="", help="--work --settle ack: reply with each payload onto this queue")
    parser.add_argument("--reply-ttl", type=float, default=0, help="publish TTL of the replies, in seconds")
    args = parser.parse_args()
    for flag, value in (("--hold", args.hold), ("--work", args.work)):
        if value is not None and not 1 <= value <= 10000:
            parser.error(f"{flag} must be between 1 and 10000 (the server's credit limit)")

    # Switchyard serves plaintext gRPC unless it is put behind TLS.
    with grpc.insecure_channel(args.address) as channel:
        stub = pb_grpc.QueueServiceStub(channel)
        try:
            if args.tour:
                tour(stub, args)
            elif args.work is not None:
                work(stub, args)
            else:
                hold(stub, args)
        except grpc.RpcError as err:
            log(f"RPC failed: {err.code().name}: {err.details()}")
            return 1
        except WorkerError as err:
            log(err)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
