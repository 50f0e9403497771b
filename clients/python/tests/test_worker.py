"""switchyard.Worker against real servers: outcomes, lease extension, graceful stop,
drain, and reconnection after the server dies. Work takes real time here (the server is
another process with Redis's clock), so the durations are kept to a few seconds."""

import collections
import threading
import time
import unittest

import grpc

import switchyard
from harness import ADMIN_TOKEN, FAST, LEASER_TOKEN, Forwarder, Redis, Server, ServerTest, fresh_client, wait_for



class Recorder:
    """A handler that records each delivery and does what `plan(delivery)` returns."""

    def __init__(self, plan=lambda d: None):
        self.plan = plan
        self.lock = threading.Lock()
        self.seen = []
        #: (payload, delivery_count, last_error) of each delivery.
        self.errors = []

    def __call__(self, d):
        with self.lock:
            self.seen.append((d.id, d.delivery_count, d.payload))
            self.errors.append((d.payload, d.delivery_count, d.last_error))
        return self.plan(d)

    def ids(self):
        with self.lock:
            return [s[0] for s in self.seen]


def run_worker(test, *args, **kwargs):
    worker = switchyard.Worker(*args, **kwargs).start()

    def stop():
        worker.stop()
        worker.join(30)

    test.addCleanup(stop)
    return worker


class Outcomes(ServerTest):
    def test_handles_every_item_once_with_concurrency(self):
        q = self.fresh_queue()
        ids = self.client.enqueue(q, [f"item {i}" for i in range(300)])
        running, most = [0], [0]
        lock = threading.Lock()

        def plan(d):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.002)
            with lock:
                running[0] -= 1

        handler = Recorder(plan)
        worker = run_worker(self, self.client, q, handler, concurrency=8)
        wait_for(lambda: self.client.queue_stats(q).completed_total == 300, what="300 acks")
        self.assertEqual(sorted(handler.ids()), sorted(ids))
        self.assertLessEqual(most[0], 8)
        self.assertGreater(most[0], 1)
        stats = self.client.queue_stats(q)
        self.assertEqual((stats.ready, stats.processing, stats.leased_total), (0, 0, 300))
        self.assertEqual(worker.stats["acked"], 300)

    def test_the_stream_announces_the_receive_limit_so_an_item_over_4_mib_arrives(self):
        # The channel receives 64 MiB and the open says so: without it the server would keep to
        # gRPC's default 4 MiB and dead-letter an item that needs a larger message.
        q = self.fresh_queue()
        pad = "x" * 5_000_000
        self.client.enqueue(q, [switchyard.Item("big", {"pad": pad}), b"small"])
        handler = Recorder()
        run_worker(self, self.client, q, handler)
        wait_for(lambda: self.client.queue_stats(q).completed_total == 2, what="both items acked")
        self.assertEqual([s[2] for s in handler.seen], [b"big", b"small"])
        self.assertEqual(self.client.queue_stats(q).dead_letter, 0)

    def test_drop_retry_reply_and_failure(self):
        q = self.fresh_queue()
        replies = self.fresh_queue("simple")
        errors = []

        def plan(d):
            if d.payload == b"drop":
                raise switchyard.Drop("never valid")
            if d.payload == b"retry" and d.delivery_count == 1:
                raise switchyard.Retry("not yet")
            if d.payload == b"boom" and d.delivery_count == 1:
                raise ValueError("flaky dependency")
            if d.payload == b"reply":
                return switchyard.Reply(replies, [switchyard.Item("thumbnail", {"of": d.id})])
            return None

        handler = Recorder(plan)
        ids = dict(zip([b"drop", b"retry", b"boom", b"reply"], self.client.enqueue(q, ["drop", "retry", "boom", "reply"])))
        worker = run_worker(self, self.client, q, handler, concurrency=2, on_error=lambda err, d=None: errors.append((err, d)))
        wait_for(lambda: self.client.queue_stats(q).completed_total == 4, what="4 items completed")
        seen = collections.Counter((p, n) for _, n, p in handler.seen)
        self.assertEqual(seen, {(b"drop", 1): 1, (b"retry", 1): 1, (b"retry", 2): 1, (b"boom", 1): 1, (b"boom", 2): 1, (b"reply", 1): 1})
        self.assertEqual([(type(e).__name__, str(e), d.id) for e, d in errors], [("ValueError", "flaky dependency", ids[b"boom"])])
        self.assertEqual((worker.stats["dropped"], worker.stats["retried"], worker.stats["acked"]), (1, 2, 3))
        reply = self.client.peek(replies).items
        self.assertEqual([(i.payload, dict(i.headers)) for i in reply], [(b"thumbnail", {"of": ids[b"reply"]})])
        # The reason of a retry comes back with the next delivery.
        last_errors = {p: e for p, n, e in handler.errors if n == 2}
        self.assertEqual(last_errors, {b"retry": "not yet", b"boom": "ValueError: flaky dependency"})

    def test_a_retry_with_a_delay_comes_back_no_sooner(self):
        q = self.fresh_queue()
        times = []

        def plan(d):
            times.append(time.monotonic())
            if d.delivery_count == 1:
                raise switchyard.Retry("busy", delay=1.0)

        handler = Recorder(plan)
        self.client.enqueue(q, [b"x"])
        run_worker(self, self.client, q, handler)
        wait_for(lambda: self.client.queue_stats(q).completed_total == 1, timeout=10, what="the second delivery's ack")
        self.assertEqual([(n, e) for _, n, e in handler.errors], [(1, ""), (2, "busy")])
        self.assertGreaterEqual(times[1] - times[0], 0.9)

    def test_an_undeclared_queue_stops_the_worker_with_not_found(self):
        worker = switchyard.Worker(self.client, "{never-declared}", lambda d: None)
        started = time.monotonic()
        with self.assertRaises(switchyard.Error) as caught:
            worker.run()
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual((caught.exception.reason, caught.exception.metadata), ("QUEUE_NOT_FOUND", {"queue": "{never-declared}"}))
        self.assertLess(time.monotonic() - started, 5)

    def test_stop_lets_running_handlers_finish_and_settle(self):
        q = self.fresh_queue()
        self.client.enqueue(q, [str(i) for i in range(20)])
        started = threading.Semaphore(0)

        def plan(d):
            started.release()
            time.sleep(0.5)

        handler = Recorder(plan)
        worker = switchyard.Worker(self.client, q, handler, concurrency=4).start()
        for _ in range(4):
            self.assertTrue(started.acquire(timeout=10))
        worker.stop()
        worker.join(20)
        stats = self.client.queue_stats(q)
        # Every item a handler started was acked; the rest went back (or never left).
        self.assertEqual(stats.completed_total, len(handler.seen))
        self.assertEqual((stats.processing, stats.ready), (0, 20 - len(handler.seen)))
        self.assertGreaterEqual(len(handler.seen), 4)


class SilentStream(ServerTest):
    """A stream that stops hearing from the server (heartbeats included) is taken for dead."""

    def test_after_three_silent_heartbeat_intervals_it_opens_a_new_stream(self):
        q = self.fresh_queue()
        hop = Forwarder(self.server.address)
        self.addCleanup(hop.close)
        with fresh_client(hop.address, token=ADMIN_TOKEN) as through:
            handler = Recorder()
            worker = run_worker(self, through, q, handler)
            self.client.enqueue(q, [b"before"])
            wait_for(lambda: len(handler.seen) == 1, what="the first item")
            hop.frozen.set()  # nothing crosses now, not even heartbeats
            wait_for(lambda: worker.stats["streams"] == 2, timeout=10, what="a new stream after the silence")
            hop.frozen.clear()
            self.client.enqueue(q, [b"after"])
            wait_for(lambda: len(handler.seen) == 2, what="the item after the silence")
        self.assertEqual([p for _, _, p in handler.seen], [b"before", b"after"])


class LeaseExtension(ServerTest):
    """A job longer than min_idle keeps its item only if its lease is extended: by default
    every half min_idle, which LeaseOpened tells even a token that may not read the declaration."""

    def test_extends_before_half_of_min_idle_and_without_it_the_watchdog_hands_the_item_out_again(self):
        leaser = switchyard.Client(self.server.address, token=LEASER_TOKEN)
        self.addCleanup(leaser.close)
        # The three jobs run at once (each takes 4.5 s).
        cases = {"auto": (self.client, {}), "off": (self.client, {"extend_every": 0}), "lease-only": (leaser, {})}
        runs = {}
        for name, (client, options) in cases.items():
            q = "{long-%s-%d}" % (name, time.monotonic_ns())
            self.client.create_queue(q, recovery_set=q + ".claims", min_idle=2)
            self.client.enqueue(q, [b"long job"])
            done = threading.Event()
            # Longer than min_idle (2 s) by more than the watchdog's interval and a loaded machine's lag.
            handler = Recorder(lambda d, done=done: (time.sleep(4.5), done.set()) if d.delivery_count == 1 else None)
            run_worker(self, client, q, handler, concurrency=2, **options)
            runs[name] = (q, done, handler)
        for q, done, _ in runs.values():
            self.assertTrue(done.wait(15))
            wait_for(lambda q=q: self.client.queue_stats(q).processing == 0, what="the item to be settled")
        self.assertEqual(
            {name: [n for _, n, _ in h.seen] for name, (_, _, h) in runs.items()},
            {"auto": [1], "off": [1, 2], "lease-only": [1]},
        )


class Reconnection(unittest.TestCase):
    """Servers that drain or die under a running worker; it reconnects on its own."""

    def setUp(self):
        self.redis = Redis()
        self.addCleanup(self.redis.stop)

    def server(self, port=0, **env):
        server = Server(self.redis, port=port, env={**FAST, **env})
        self.addCleanup(server.stop)
        return server

    def test_on_drain_it_finishes_and_settles_on_the_stream_then_follows_the_next_server(self):
        first = self.server(SWITCHYARD_SHUTDOWN_GRACE="20s")
        client = switchyard.Client(first.address)
        self.addCleanup(client.close)
        client.create_queue("{drain}")
        in_handler = threading.Event()

        def plan(d):
            if d.payload == b"slow":
                in_handler.set()
                time.sleep(1.0)

        handler = Recorder(plan)
        worker = run_worker(self, client, "{drain}", handler, concurrency=2)
        client.enqueue("{drain}", [b"slow"])
        self.assertTrue(in_handler.wait(10))
        first.terminate()  # drain: the slow item's ack must still reach this server
        self.assertEqual(first.wait(30), 0)
        second = self.server(port=first.port)
        with fresh_client(second.address) as other:
            other.enqueue("{drain}", [b"after"])
            wait_for(lambda: other.queue_stats("{drain}").completed_total == 2, timeout=15, what="both items acked")
        self.assertEqual(sorted(p for _, _, p in handler.seen), [b"after", b"slow"])
        self.assertGreaterEqual(worker.stats["streams"], 2)
        self.assertEqual(worker.stats["settle_failures"], 0)

    def test_after_the_server_is_killed_every_item_is_handled_when_a_server_is_back(self):
        first = self.server()
        client = switchyard.Client(first.address)
        self.addCleanup(client.close)
        client.create_queue("{kill}", recovery_set="{kill}.claims", min_idle=1)
        ids = client.enqueue("{kill}", [str(i) for i in range(40)])
        release = threading.Event()
        handler = Recorder(lambda d: release.wait(20))
        worker = run_worker(self, client, "{kill}", handler, concurrency=4, extend_every=0)
        wait_for(lambda: len(handler.seen) == 4, what="4 items in the handlers")
        first.kill()  # its 4 items stay in the processing list; the watchdog returns them after min_idle
        release.set()
        second = self.server(port=first.port)
        with fresh_client(second.address) as other:
            wait_for(lambda: other.queue_stats("{kill}").completed_total == 40, timeout=20, what="all 40 items completed")
            stats = other.queue_stats("{kill}")
            self.assertEqual((stats.ready, stats.processing, stats.dead_letter), (0, 0, 0))
        self.assertEqual(set(handler.ids()), set(ids))
        self.assertGreaterEqual(worker.stats["streams"], 2)


if __name__ == "__main__":
    unittest.main()
