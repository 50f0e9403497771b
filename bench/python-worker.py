#!/usr/bin/python3
"""The benchmark's Python worker (bench/deployed.ts), on plain grpcio and the
stubs of examples/python (see examples/python/generate.sh).

    /usr/bin/python3 bench/python-worker.py ADDRESS QUEUE CREDIT

Leases from QUEUE on one Lease stream with CREDIT items in flight, parses
each payload as JSON, and acks each batch of deliveries it received with one
ack_batch message, as the TypeScript runWorker does.

stdin:  "go" opens the stream; "stop" half-closes it (the server then ends it).
stdout: "ready" once connected; "progress N LAST_US" every few ms while the
count changed; "done N LAST_US" at the end. LAST_US is when the last item was
handled, on CLOCK_MONOTONIC in microseconds (the parent's clock too).
"""

import json
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
from stubs import grpc, pb, pb_grpc  # noqa: E402

address, queue_name, credit = sys.argv[1], sys.argv[2], int(sys.argv[3])
PROGRESS_EVERY = 0.005
_END = object()

handled = 0
last_us = 0.0
out_lock = threading.Lock()


def say(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def now_us():
    return time.monotonic_ns() / 1000.0


def requests(outbox):
    while True:
        msg = outbox.get()
        if msg is _END:
            return
        yield msg


def reporter(stop):
    reported = 0
    while not stop.wait(PROGRESS_EVERY):
        if handled != reported:
            reported = handled
            say(f"progress {reported} {last_us:.1f}")


def main():
    global handled, last_us
    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)
    stub = pb_grpc.QueueServiceStub(channel)
    say("ready")
    commands = queue.Queue()

    def read_stdin():
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("stop")

    threading.Thread(target=read_stdin, daemon=True).start()
    while commands.get() != "go":
        pass
    outbox = queue.Queue()
    outbox.put(pb.LeaseRequest(open=pb.LeaseOpen(queue=queue_name, credit=credit)))
    call = stub.Lease(requests(outbox))

    def stop_on_command():
        while commands.get() != "stop":
            pass
        outbox.put(_END)

    threading.Thread(target=stop_on_command, daemon=True).start()
    done = threading.Event()
    threading.Thread(target=reporter, args=(done,), daemon=True).start()
    for response in call:
        if response.WhichOneof("kind") != "deliveries":
            continue
        tokens = []
        for d in response.deliveries.deliveries:
            json.loads(d.payload)
            tokens.append(d.lease_token)
            handled += 1
            last_us = now_us()
        outbox.put(pb.LeaseRequest(ack_batch=pb.LeaseAckBatch(lease_tokens=tokens)))
    done.set()
    say(f"done {handled} {last_us:.1f}")
    channel.close()


main()
