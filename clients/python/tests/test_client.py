"""switchyard.Client against a real server: enqueue, administration, unary settles, auth."""

import datetime
import secrets
import unittest

import grpc

import switchyard
from harness import PY_TOKEN, ServerTest, wait_for


class EnqueueAndAdmin(ServerTest):
    def test_enqueues_bytes_text_and_items_with_headers_in_order(self):
        q = self.fresh_queue()
        ids = self.client.enqueue(q, [b"\x00raw", "text é", switchyard.Item("with headers", {"traceparent": "00-abc"})])
        self.assertEqual(len(ids), 3)
        self.assertEqual(len(set(ids)), 3)
        peeked = self.client.peek(q, limit=10)
        self.assertEqual(peeked.total, 3)
        self.assertEqual([i.id for i in peeked.items], ids)
        self.assertEqual([i.payload for i in peeked.items], [b"\x00raw", "text é".encode(), b"with headers"])
        self.assertEqual(dict(peeked.items[2].headers), {"traceparent": "00-abc"})
        stats = self.client.queue_stats(q)
        self.assertEqual((stats.ready, stats.processing, stats.dead_letter), (3, 0, 0))

    def test_declares_with_defaults_filled_in_and_lists_every_page(self):
        names = [self.fresh_queue(max_deliveries=3) for _ in range(3)]
        declared = self.client.get_queue(names[0])
        self.assertEqual(declared.processing_list, names[0] + ".processing")
        self.assertEqual(declared.dead_letter_list, names[0] + ".dead")
        self.assertEqual(declared.max_deliveries, 3)
        listed = [q.name for q in self.client.list_queues(page_size=2)]
        for name in names:
            self.assertIn(name, listed)
        self.assertEqual(listed, sorted(listed))

    def test_a_declaration_with_a_recovery_set_keeps_min_idle(self):
        q = "{claims-%s}" % secrets.token_hex(4)
        declared = self.client.create_queue(q, recovery_set=q + ".claims", min_idle=datetime.timedelta(seconds=90))
        self.assertEqual(declared.min_idle.seconds, 90)

    def test_refusals_carry_the_status_and_what_to_fix(self):
        with self.assertRaises(switchyard.Error) as caught:
            self.client.enqueue("{nobody-declared-this}", [b"x"])
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn('queue "{nobody-declared-this}" is not declared', caught.exception.details)
        # The reason to branch on (google.rpc.ErrorInfo, read from the status's trailer).
        self.assertEqual((caught.exception.reason, caught.exception.metadata), ("QUEUE_NOT_FOUND", {"queue": "{nobody-declared-this}"}))
        with self.assertRaises(switchyard.Error) as caught:
            self.client.create_queue("{a}", recovery_set="{b}.claims", min_idle=60)
        self.assertEqual(caught.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(caught.exception.reason, "SLOT_MISMATCH")
        with self.assertRaises(ValueError):
            self.client.create_queue("{a}", "fifo")

    def test_an_idempotency_key_enqueues_once(self):
        q = self.fresh_queue()
        item = switchyard.Item("charge order 7", idempotency_key="order-7")
        first = self.client.enqueue(q, [item])
        self.assertEqual(self.client.enqueue(q, [item]), first)
        self.assertEqual(self.client.queue_stats(q).ready, 1)

    def test_a_delayed_item_waits_then_becomes_ready(self):
        q = self.fresh_queue()
        self.client.enqueue(q, [switchyard.Item("later", delay=datetime.timedelta(milliseconds=800)), "now"])
        stats = self.client.queue_stats(q)
        self.assertEqual((stats.ready, stats.delayed), (1, 1))
        wait_for(lambda: self.client.queue_stats(q).ready == 2, timeout=10, what="the delayed item to be ready")

    def test_purges_the_waiting_items(self):
        q = self.fresh_queue("simple")
        self.client.enqueue(q, [b"1", b"2"])
        self.assertEqual(self.client.purge(q), 2)
        self.assertEqual(self.client.queue_stats(q).ready, 0)


class UnarySettles(ServerTest):
    def lease(self, q, n):
        """n deliveries on a raw Lease stream, which then pauses (credit 0) and stays open."""
        stream = self.client.lease(q, n)
        self.addCleanup(stream.cancel)
        got = []
        responses = stream.responses()
        for response in responses:
            if response.WhichOneof("kind") == "deliveries":
                got.extend(response.deliveries.deliveries)
                if len(got) == n:
                    break
        else:
            self.fail(f"the stream ended after {len(got)} of {n} deliveries")
        stream.set_credit(0)
        # Credit 0 goes out on the stream's sending thread, a unary settle from this one: were the
        # settle first, the unit it frees would take the retried item straight back to this stream.
        # The server reads a stream's messages in order and answers every extend, so once this
        # extend's answer is here, credit 0 holds.
        token = got[0].lease_token
        stream.extend(token)
        for response in responses:
            if response.WhichOneof("kind") == "settle_result" and response.settle_result.lease_token == token:
                self.assertEqual(response.settle_result.code, 0, response.settle_result.message)
                break
        else:
            self.fail("the stream ended before the extend's answer")
        return got

    def test_ack_with_a_reply_enqueues_it_and_a_second_ack_is_refused(self):
        q = self.fresh_queue()
        replies = self.fresh_queue("simple")
        self.client.enqueue(q, [b"job"])
        (d,) = self.lease(q, 1)
        reply_ids = self.client.ack(d.lease_token, switchyard.Reply(replies, [switchyard.Item("done", {"job": d.id})], ttl=3600))
        self.assertEqual(len(reply_ids), 1)
        peeked = self.client.peek(replies)
        self.assertEqual([(i.id, i.payload, dict(i.headers)) for i in peeked.items], [(reply_ids[0], b"done", {"job": d.id})])
        with self.assertRaises(switchyard.Error) as caught:
            self.client.ack(d.lease_token)
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("no longer held", caught.exception.details)
        wait_for(lambda: self.client.queue_stats(q).completed_total == 1, what="the ack to count")

    def test_retry_returns_the_item_and_dead_letters_it_after_max_deliveries(self):
        q = self.fresh_queue(max_deliveries=2)
        (item_id,) = self.client.enqueue(q, [b"poison"])
        (first,) = self.lease(q, 1)
        self.assertFalse(self.client.retry(first.lease_token, reason="flaky"))
        (second,) = self.lease(q, 1)
        self.assertEqual(second.delivery_count, 2)
        self.assertTrue(self.client.retry(second.lease_token, reason="still flaky"))
        dead = self.client.peek(q, "dead_letter")
        self.assertEqual([(i.id, i.delivery_count) for i in dead.items], [(item_id, 2)])
        self.assertEqual(self.client.requeue_dead_letters(q, [item_id]), 1)
        self.assertEqual(self.client.peek(q).items[0].id, item_id)

    def test_drop_and_extend_by_token(self):
        q = "{ext-%s}" % secrets.token_hex(4)
        self.client.create_queue(q, recovery_set=q + ".claims", min_idle=60)
        self.client.enqueue(q, [b"a", b"b"])
        a, b = self.lease(q, 2)
        expires = self.client.extend(a.lease_token)
        self.assertIsInstance(expires, datetime.datetime)
        self.assertGreater(expires, datetime.datetime.utcnow() + datetime.timedelta(seconds=50))
        self.client.drop(b.lease_token, reason="not wanted")
        self.client.ack(a.lease_token)
        stats = self.client.queue_stats(q)
        self.assertEqual((stats.ready, stats.processing, stats.completed_total), (0, 0, 2))

    def test_deletes_dead_letters(self):
        q = self.fresh_queue(max_deliveries=1)
        self.client.enqueue(q, [b"x", b"y"])
        for d in self.lease(q, 2):
            self.assertTrue(self.client.retry(d.lease_token))
        self.assertEqual(self.client.delete_dead_letters(q), 2)
        self.assertEqual(self.client.queue_stats(q).dead_letter, 0)


class Auth(ServerTest):
    """With tokens configured, the client's token goes with every call, Lease included."""

    def test_calls_without_the_token_are_refused_and_with_it_pass(self):
        q = self.fresh_queue(prefix="py-")  # within the py token's {py* scopes
        with switchyard.Client(self.server.address) as anonymous:
            with self.assertRaises(switchyard.Error) as caught:
                anonymous.enqueue(q, [b"x"])
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        with switchyard.Client(self.server.address, token=PY_TOKEN) as client:
            client.enqueue(q, [b"hello"])
            with self.assertRaises(switchyard.Error) as caught:
                client.enqueue("{other}", [b"x"])
            self.assertEqual(caught.exception.code, grpc.StatusCode.PERMISSION_DENIED)
            handled = []
            worker = switchyard.Worker(client, q, lambda d: handled.append(d.payload)).start()
            wait_for(lambda: handled, what="the delivery")
            worker.stop()
            worker.join(10)
            self.assertEqual(handled, [b"hello"])
            self.assertEqual(client.queue_stats(q).completed_total, 1)


if __name__ == "__main__":
    unittest.main()
