"""Worker: leases items from one queue and runs a handler on each, as
docs/worker-protocol.md describes.

Threads: the caller's thread runs `run()` and supervises (reconnects, extends leases,
watches for a silent stream, stops gracefully); one thread per stream reads the
server's messages; a pool of `concurrency` threads runs the handler. Settles go out on
the stream that delivered the item, or, once that stream has ended, as unary calls.

A handler's outcome:
- it returns None, or a Reply: the item is acked (with the Reply's items);
- it raises Drop(reason): the item is dropped;
- it raises Retry(reason, delay), or anything else: the item is retried (and goes to the
  dead-letter list once it used up the queue's max_deliveries).
"""

import collections
import logging
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from . import messages
from ._proto import pb
from .client import Client
from .errors import FATAL, Error
from .lease import LeaseStream
from .messages import Reply

log = logging.getLogger("switchyard")

# A stream that says nothing for this many heartbeat intervals is dead (§2 Heartbeats).
SILENT_INTERVALS = 3
# How long an open may take before the worker gives up on that stream and tries again.
OPEN_TIMEOUT = 30.0
# The supervisor looks at leases and silence this often (seconds).
TICK = 0.1
# Settles remembered per stream, to send again when the server answers UNAVAILABLE.
REMEMBERED_SETTLES = 10_000
# How long a settle sent after its stream ended is tried again while no server answers (seconds).
UNARY_SETTLE_TIME = 30.0


class Retry(Exception):
    """Raised by a handler: retry the item. `reason` says why (the next delivery's
    last_error); `delay` (seconds) holds the next delivery back that long instead of the
    queue's retry policy."""

    def __init__(self, reason="", delay=None):
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class Drop(Exception):
    """Raised by a handler: drop the item, it can never succeed."""

    def __init__(self, reason=""):
        super().__init__(reason)
        self.reason = reason


class Delivery:
    """One leased item, as the handler sees it (`raw` is the pb.Delivery)."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    lease_token = property(lambda self: self.raw.lease_token)
    fence = property(lambda self: self.raw.fence, doc="grows with every lease of the queue: fence downstream writes with it")
    id = property(lambda self: self.raw.id, doc='"" for an item another Redis client pushed raw')
    payload = property(lambda self: self.raw.payload)
    headers = property(lambda self: dict(self.raw.headers))
    delivery_count = property(lambda self: self.raw.delivery_count)
    queue = property(lambda self: self.raw.queue)

    @property
    def text(self):
        return self.raw.payload.decode("utf-8")

    @property
    def enqueue_time(self):
        """A naive UTC datetime, or None for a raw item."""
        return self.raw.enqueue_time.ToDatetime() if self.raw.HasField("enqueue_time") else None

    @property
    def last_error(self):
        """Why the previous delivery failed: a Retry's reason, or the watchdog's ("" on a first delivery)."""
        return self.raw.last_error


class Backoff:
    """Exponential backoff with full jitter: the n-th wait in a row is uniform in [0, min(cap, base·2ⁿ)]."""

    def __init__(self, base=0.1, cap=5.0):
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self):
        delay = random.uniform(0, min(self.cap, self.base * 2**self.attempt))
        self.attempt += 1
        return delay

    def reset(self):
        self.attempt = 0


class _Held:
    """A delivery the worker holds: its stream, and when its lease is next extended."""

    __slots__ = ("delivery", "session", "extend_at")

    def __init__(self, delivery, session, extend_at):
        self.delivery, self.session, self.extend_at = delivery, session, extend_at


class _Session:
    """One Lease stream and what the worker learnt on it."""

    def __init__(self, client, queue, credit, group=""):
        self.stream = LeaseStream(client.queues, queue, credit, client.metadata, client.receive_limit, group)
        self.credit = credit
        self.opened = None
        self.drained = False
        self.status = None
        self.ended = threading.Event()
        self.started = self.last_message = time.monotonic()
        self.sent = collections.OrderedDict()
        self.extend_every = None

    def remember(self, token, request):
        self.sent[token] = request
        if len(self.sent) > REMEMBERED_SETTLES:
            self.sent.popitem(last=False)


def _reason(err):
    text = f"{type(err).__name__}: {err}"
    return text[:1000]


class Worker:
    """Runs `handler(Delivery)` on the items of `queue`, `concurrency` at once.

    `client` is a Client or an address (then the worker makes and closes its own).
    `extend_every` (seconds) sets how often a running item's lease is extended; by
    default it is half the queue's min_idle, from the server (LeaseOpened.min_idle) or the
    declaration (GetQueue, if the token may read it); 0 turns extension off.
    `on_error(err, delivery)` hears of handler exceptions and failed settles.
    `stop_grace` bounds how long stop() waits for running handlers.
    `group` names the consumer group of a STREAM queue.
    """

    def __init__(self, client, queue, handler, *, concurrency=1, extend_every=None, on_error=None,
                 stop_grace=30.0, backoff=None, group=""):
        if not 1 <= concurrency <= 10_000:
            raise ValueError(f"concurrency must be between 1 and 10000, not {concurrency}")
        self._own_client = not isinstance(client, Client)
        self.client = Client(client) if self._own_client else client
        self.queue = queue
        #: A STREAM queue's consumer group ("" for list queues).
        self.group = group
        self.handler = handler
        self.concurrency = concurrency
        self.extend_every = extend_every
        self.on_error = on_error or (lambda err, delivery=None: log.warning("switchyard worker: %s", err))
        self.stop_grace = stop_grace
        self.backoff = backoff or Backoff()
        #: Counts of what the worker did (acked, retried, dropped, handler_errors, settle_failures, streams).
        self.stats = collections.Counter()
        self._lock = threading.Condition()
        self._held = {}
        self._session = None
        self._stopping = threading.Event()
        self._declared_min_idle = None
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="switchyard-handler")
        self._thread = None
        #: The Error that ended a worker started with start(), if one did.
        self.error = None

    # Running

    def run(self, handle_signals=False):
        """Leases and handles until stop(); raises Error when the stream ends for good
        (queue not declared, no permission, ...). With handle_signals, SIGTERM and SIGINT
        call stop() (main thread only)."""
        restore = self._install_signals() if handle_signals else {}
        try:
            while not self._stopping.is_set():
                session = self._open()
                self._supervise(session)
                if self._stopping.is_set():
                    break
                code, details = session.status.code, session.status.details
                if code in FATAL:
                    raise session.status
                if session.opened is not None:
                    self.backoff.reset()
                delay = random.uniform(0, 0.05) if code == grpc.StatusCode.OK else self.backoff.next()
                log.info("switchyard: lease stream on %s ended (%s: %s); reconnecting in %.2fs", self.queue, code.name, details, delay)
                self._stopping.wait(delay)
            self._finish()
        finally:
            self._pool.shutdown(wait=True)
            for sig, handler in restore.items():
                signal.signal(sig, handler)
            if self._own_client:
                self.client.close()

    def start(self):
        """Runs run() on a thread of its own; returns self (join() waits for it)."""
        self._thread = threading.Thread(target=self._run_logged, name="switchyard-worker", daemon=True)
        self._thread.start()
        return self

    def _run_logged(self):
        try:
            self.run()
        except Error as err:
            self.error = err
            log.error("switchyard worker stopped: %s", err)

    def join(self, timeout=None):
        if self._thread:
            self._thread.join(timeout)

    def stop(self):
        """Asks the worker to stop: no new items, running handlers finish (up to
        stop_grace) and their items are settled, then the stream closes and run() returns.
        Returns at once; safe from a signal handler."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def _install_signals(self):
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: self.stop())
        return previous

    # One stream

    def _open(self):
        with self._lock:
            # Handlers still running for an earlier stream count against the concurrency.
            credit = max(1, self.concurrency - len(self._held))
            session = _Session(self.client, self.queue, credit, self.group)
            self._session = session
        self._count("streams")
        threading.Thread(target=self._read, args=(session,), name="switchyard-lease-reader", daemon=True).start()
        return session

    def _read(self, session):
        try:
            for response in session.stream.responses():
                session.last_message = time.monotonic()
                kind = response.WhichOneof("kind")
                if kind == "deliveries":
                    for d in response.deliveries.deliveries:
                        self._take(session, Delivery(d))
                elif kind == "opened":
                    session.extend_every = self._extension_interval(response.opened)
                    session.opened = response.opened
                elif kind == "settle_result":
                    self._settle_result(session, response.settle_result)
                elif kind == "drain":
                    session.drained = True
                    log.info("switchyard: the server drains (grace %.1fs); finishing what we hold",
                             response.drain.grace.ToNanoseconds() / 1e9)
                # heartbeat: being a message is all it does
            session.status = Error(grpc.StatusCode.OK, "")
        except grpc.RpcError as err:
            session.status = Error.from_rpc(err)
        except Exception as err:  # a bug here must not leave the worker waiting forever
            session.status = Error(grpc.StatusCode.UNKNOWN, _reason(err))
            session.stream.cancel()
        finally:
            session.ended.set()
            with self._lock:
                self._lock.notify_all()

    def _supervise(self, session):
        """Waits until the stream ends or stop() is called; meanwhile extends leases and
        cancels a stream that has gone silent."""
        while not session.ended.is_set() and not self._stopping.is_set():
            with self._lock:
                self._lock.wait(TICK)
            now = time.monotonic()
            if session.opened is None:
                if now - session.started > OPEN_TIMEOUT:
                    log.warning("switchyard: no answer to open in %.0fs; trying again", OPEN_TIMEOUT)
                    session.stream.cancel()
                continue
            interval = session.opened.heartbeat_interval.ToNanoseconds() / 1e9 or 15.0
            if now - session.last_message > SILENT_INTERVALS * interval:
                log.warning("switchyard: lease stream silent for %.1fs; reconnecting", now - session.last_message)
                session.stream.cancel()
                continue
            self._extend_due(now)

    def _finish(self):
        """Graceful stop: credit 0, running handlers finish and settle, then half-close."""
        session = self._session
        if session is not None and not session.ended.is_set():
            session.stream.set_credit(0)
        deadline = time.monotonic() + self.stop_grace
        with self._lock:
            while self._held and time.monotonic() < deadline:
                self._lock.wait(min(TICK, max(0.0, deadline - time.monotonic())))
                self._extend_due(time.monotonic())
        if session is not None and not session.ended.is_set():
            session.stream.close()
            if not session.ended.wait(10.0):
                session.stream.cancel()

    # Items

    def _take(self, session, delivery):
        every = session.extend_every
        with self._lock:
            held = _Held(delivery, session, time.monotonic() + every if every else None)
            self._held[delivery.lease_token] = held
        self._pool.submit(self._handle, held)

    def _handle(self, held):
        d = held.delivery
        try:
            result = self.handler(d)
            request, outcome = messages.ack(d.lease_token, result if isinstance(result, Reply) else None), "acked"
        except Drop as e:
            request, outcome = messages.drop(d.lease_token, e.reason), "dropped"
        except Retry as e:
            request, outcome = messages.retry(d.lease_token, e.reason, e.delay), "retried"
        except Exception as e:
            self._count("handler_errors")
            self._report(e, d)
            request, outcome = messages.retry(d.lease_token, _reason(e)), "retried"
        self._count(outcome)
        self._settle(held, request)

    def _settle(self, held, request):
        token = held.delivery.lease_token
        with self._lock:
            self._held.pop(token, None)
            session, current = held.session, self._session
            alive = not session.ended.is_set()
            if alive:
                session.remember(token, request)
                session.stream.send(request)
            if current is not session and not current.ended.is_set() and current.credit < self.concurrency:
                # An earlier stream's item is done: the current stream may hold one more.
                current.credit += 1
                current.stream.set_credit(current.credit)
            self._lock.notify_all()
        if not alive:
            self._settle_unary(request, held.delivery)

    def _settle_unary(self, request, delivery):
        """Settles by token after the item's stream ended. A server that saw the stream end
        has returned the item and says so (FAILED_PRECONDITION); one that died did not, and
        the settle is tried again (UNAVAILABLE) until a server answers or UNARY_SETTLE_TIME
        passes, after which the item is the watchdog's."""
        kind = request.WhichOneof("kind")
        call = {"ack": self.client.queues.Ack, "retry": self.client.queues.Retry, "drop": self.client.queues.Drop}[kind]
        backoff, deadline = Backoff(), time.monotonic() + UNARY_SETTLE_TIME
        while True:
            try:
                call(getattr(request, kind), timeout=self.client.timeout, metadata=self.client.metadata, wait_for_ready=True)
                return
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline:
                    time.sleep(backoff.next())
                    continue
                if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    log.info("switchyard: item %s went back to the queue when its stream ended; it will be delivered again", delivery.id)
                else:
                    self._count("settle_failures")
                    self._report(Error.from_rpc(err), delivery)
                return

    def _settle_result(self, session, result):
        if result.code == grpc.StatusCode.OK.value[0]:
            return  # an extend that applied
        request = session.sent.get(result.lease_token)
        if result.code == grpc.StatusCode.UNAVAILABLE.value[0] and request is not None:
            session.sent.pop(result.lease_token, None)  # sent again once: a second failure is reported
            session.stream.send(request)
            return
        self._count("settle_failures")
        code = next((c for c in grpc.StatusCode if c.value[0] == result.code), grpc.StatusCode.UNKNOWN)
        with self._lock:
            held = self._held.get(result.lease_token)
            if held is not None:
                held.extend_at = None  # the lease is lost: extending it again cannot help
        # SettleResult.reason: the reason a unary settle's ErrorInfo would carry.
        self._report(Error(code, result.message, result.reason), held.delivery if held else None)

    def _count(self, what):
        # Handler threads count at once: += on a Counter is a read, then a write.
        with self._lock:
            self.stats[what] += 1

    def _report(self, err, delivery):
        try:
            self.on_error(err, delivery)
        except Exception:
            log.exception("switchyard: on_error raised")

    # Lease extension (docs/worker-protocol.md §8)

    def _extension_interval(self, opened):
        if self.extend_every is not None:
            return self.extend_every or None
        if opened.HasField("min_idle"):
            return opened.min_idle.ToNanoseconds() / 2e9
        if opened.mode != pb.QUEUE_MODE_RELIABLE:
            return None
        if self._declared_min_idle is None:
            # A server before LeaseOpened.min_idle: the declaration says, if the token may read it.
            try:
                queue = self.client.get_queue(self.queue)
                self._declared_min_idle = queue.min_idle.ToNanoseconds() / 1e9 if queue.HasField("min_idle") else 0.0
            except Error as err:
                log.info("switchyard: cannot read %s's min_idle (%s); leases are not extended", self.queue, err)
                self._declared_min_idle = 0.0
        return self._declared_min_idle / 2 or None

    def _extend_due(self, now):
        with self._lock:
            for token, held in self._held.items():
                if held.extend_at is not None and now >= held.extend_at and not held.session.ended.is_set():
                    held.session.stream.extend(token)
                    held.extend_at = now + held.session.extend_every
