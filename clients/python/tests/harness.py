"""Real parts for the tests: a private redis-server on a unix socket, Switchyard servers
(`node dist/main.js` of the checkout), all on loopback. No mocks.

SWITCHYARD_REPO names the checkout (default: three folders up) and SWITCHYARD_NODE the
node binary (default: node on PATH); `npm run build` must have made dist/.
"""

import atexit
import hashlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import switchyard

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.environ.get("SWITCHYARD_REPO") or os.path.abspath(os.path.join(HERE, "..", "..", ".."))
NODE = os.environ.get("SWITCHYARD_NODE") or "node"
MAIN = os.path.join(REPO, "dist", "main.js")


def wait_for(predicate, timeout=10.0, what="condition"):
    """Polls `predicate` until it is truthy; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class Redis:
    """A redis-server of the test's own, on a unix socket in a temp folder."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sy-py-redis-")
        self.socket = os.path.join(self.dir, "redis.sock")
        self.process = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.socket, "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
        )
        wait_for(lambda: os.path.exists(self.socket), what="redis-server's socket")

    @property
    def url(self):
        return f"unix://{self.socket}"

    def stop(self):
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One Switchyard process against `redis`. `port` 0 picks one; `env` adds SWITCHYARD_* settings."""

    def __init__(self, redis, port=0, env=None):
        full = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
        full.update(
            SWITCHYARD_REDIS_URL=redis.url,
            SWITCHYARD_GRPC_ADDRESS=f"127.0.0.1:{port}",
            SWITCHYARD_HTTP_ADDRESS="off",
            SWITCHYARD_LOG_LEVEL="error",
            SWITCHYARD_AUTH="off",
        )
        full.update(env or {})
        self.process = subprocess.Popen([NODE, MAIN], env=full, stdout=subprocess.PIPE, text=True)
        # A server that neither listens nor exits (Redis unreachable, say) must not hang the run.
        ready, _, _ = select.select([self.process.stdout], [], [], 30)
        line = self.process.stdout.readline() if ready else "(nothing in 30 s)"
        if not line.startswith("switchyard listening on "):
            self.process.kill()
            self.process.wait(10)
            raise RuntimeError(f"Switchyard did not start (is dist/ built?): {line!r}")
        self.address = line.split()[-1]
        self.port = int(self.address.rsplit(":", 1)[1])

    def terminate(self):
        """SIGTERM: the server drains its lease streams, then exits."""
        self.process.send_signal(signal.SIGTERM)

    def kill(self):
        """SIGKILL: the server dies holding whatever it held."""
        self.process.kill()
        self.process.wait(10)

    def wait(self, timeout=30):
        return self.process.wait(timeout)

    def stop(self):
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process.stdout.close()


def fresh_client(address, **options):
    """A Client on a connection of its own: grpc shares connections between channels to one
    address, and one that is backing off after a server died would fail this one's calls."""
    return switchyard.Client(address, options=[("grpc.use_local_subchannel_pool", 1)], **options)


class Forwarder:
    """A TCP forwarder on loopback whose connections can be frozen: bytes stop moving both
    ways while the sockets stay open, as behind a proxy whose upstream hung."""

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.frozen = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while self.frozen.is_set():
                    time.sleep(0.01)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def token_hash(token):
    return hashlib.sha256(token.encode()).hexdigest()


# The tokens of the shared server: one may do everything, one may only lease (it cannot
# read a declaration), one may use the queues whose names start with {py.
ADMIN_TOKEN = secrets.token_urlsafe(24)
LEASER_TOKEN = secrets.token_urlsafe(24)
PY_TOKEN = secrets.token_urlsafe(24)
# Fast timers: the watchdog looks every 100 ms, idle streams hear a heartbeat every second.
# A worker takes 3 s without a message for a dead stream: with 300 ms heartbeats a loaded
# machine's pauses (a 5 MB delivery, a starved process) read as silence and items came twice.
FAST = {"SWITCHYARD_WATCHDOG_INTERVAL": "100ms", "SWITCHYARD_HEARTBEAT_INTERVAL": "1s"}

_shared = None


def shared_server():
    """One Redis and one server (auth on, FAST) for every test that does not stop or
    restart its server, started on first use and stopped when the run ends."""
    global _shared
    if _shared is None:
        tokens = [
            {"name": "admin", "sha256": token_hash(ADMIN_TOKEN), "scopes": ["*"]},
            {"name": "leaser", "sha256": token_hash(LEASER_TOKEN), "scopes": ["queue:lease"]},
            {"name": "py", "sha256": token_hash(PY_TOKEN), "scopes": ["queue:admin:{py*", "queue:enqueue:{py*", "queue:lease:{py*"]},
        ]
        redis = Redis()
        try:
            # Items up to 8 MiB stored (headers count): more than gRPC's default 4 MiB receive limit.
            env = {**FAST, "SWITCHYARD_AUTH": "on", "SWITCHYARD_AUTH_TOKENS": json.dumps(tokens), "SWITCHYARD_MAX_ITEM_BYTES": str(8 << 20)}
            server = Server(redis, env=env)
        except Exception:
            redis.stop()
            raise
        _shared = (redis, server)
        atexit.register(lambda: (server.stop(), redis.stop()))
    return _shared[1]


class ServerTest(unittest.TestCase):
    """A test class on the shared server, with `client` (the admin token)."""

    @classmethod
    def setUpClass(cls):
        cls.server = shared_server()
        cls.client = switchyard.Client(cls.server.address, token=ADMIN_TOKEN, timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def fresh_queue(self, mode="reliable", prefix="", **options):
        """A newly declared queue with a name of its own (hash-tagged, so reliable queues work on a cluster)."""
        name = "{%s%s-%d}" % (prefix, self._testMethodName, time.monotonic_ns())
        self.client.create_queue(name, mode, **options)
        return name
