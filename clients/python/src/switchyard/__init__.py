"""Switchyard's Python client: enqueue and administer queues (Client), and run
handlers on leased items (Worker). The protocol is docs/worker-protocol.md."""

from .client import Client
from .errors import Error
from .lease import LeaseStream
from .messages import Item, Reply
from .worker import Backoff, Delivery, Drop, Retry, Worker

__all__ = ["Client", "Error", "LeaseStream", "Item", "Reply", "Worker", "Delivery", "Retry", "Drop", "Backoff"]
__version__ = "0.1.0"
