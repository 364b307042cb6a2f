"""delayq's Python client: a producer, and a consumer loop that carries its
acks in its next poll. Standard library only.

    from delayq import Client, Consumer

    c = Client("http://127.0.0.1:7070")
    c.push("sms", "hello", delay_ms=5_000)
    Consumer(c, "sms", lambda m: print(m.body)).run()
"""

from .client import (
    DST_EARLIER,
    DST_LATER,
    DST_REJECT,
    DUPLICATE_EXTENDED,
    DUPLICATE_IN_FLIGHT,
    DUPLICATE_NOT_LATER,
    DUPLICATE_REPLACED,
    ON_DUPLICATE_EXTEND,
    ON_DUPLICATE_KEEP,
    ON_DUPLICATE_REPLACE,
    Client,
    Delivery,
    Pushed,
    message,
    outbox_row,
)
from .codes import ERROR_CODES
from .consumer import Consumer
from .errors import ApiError, DelayqError, TransportError

__all__ = [
    "ApiError",
    "Client",
    "Consumer",
    "DST_EARLIER",
    "DST_LATER",
    "DST_REJECT",
    "DUPLICATE_EXTENDED",
    "DUPLICATE_IN_FLIGHT",
    "DUPLICATE_NOT_LATER",
    "DUPLICATE_REPLACED",
    "DelayqError",
    "ERROR_CODES",
    "Delivery",
    "ON_DUPLICATE_EXTEND",
    "ON_DUPLICATE_KEEP",
    "ON_DUPLICATE_REPLACE",
    "Pushed",
    "TransportError",
    "message",
    "outbox_row",
]
