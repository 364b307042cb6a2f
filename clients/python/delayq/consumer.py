"""The consumer loop: the fast path by default.

Each loop long-polls ``POST /get/{topic}`` carrying the acks of the
messages its handler finished since the last poll (with their receipts),
so a burst costs one round trip per batch, not one per message. A handler
that raises nacks its message, which then follows the message's retry
policy (or is dead on its last attempt).

Semantics: **at least once**. A message whose handler finished but whose
ack did not reach the server (the process stopped, the node failed before
the next poll) is handed out again after its ttl; a handler that takes
longer than the ttl may see its message handed to another consumer, and
its late ack is refused (``stale_delivery``) and changes nothing. Make
handlers idempotent, and keep ``handler_timeout`` below the messages' ttl.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Callable, List, Optional

from .client import Client, Delivery
from .errors import ApiError, DelayqError

log = logging.getLogger("delayq")


class Consumer:
    """Runs ``handler(delivery)`` on the messages of ``topic``.

    ``loops`` long polls run at once, each taking up to ``batch`` messages
    a poll and handling them one after another (set ``loops`` to the
    concurrency wanted). ``handler_timeout`` (seconds) bounds a handler:
    one that takes longer is counted failed and its message nacked (the
    handler's thread is left to finish; Python cannot stop it).
    """

    def __init__(
        self,
        client: Client,
        topic: str,
        handler: Callable[[Delivery], None],
        *,
        loops: int = 1,
        batch: int = 32,
        poll_timeout_s: int = 5,
        handler_timeout: Optional[float] = None,
        nack_delay_ms: Optional[int] = None,
    ):
        if loops < 1 or not 1 <= batch <= 100:
            raise ValueError("loops must be at least 1 and batch 1 to 100")
        self.client = client
        self.topic = topic
        self.handler = handler
        self.loops = loops
        self.batch = batch
        self.poll_timeout_s = poll_timeout_s
        self.handler_timeout = handler_timeout
        self.nack_delay_ms = nack_delay_ms
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(max_workers=loops) if handler_timeout else None
        )

    def start(self) -> "Consumer":
        """Starts the loops in background threads."""
        for n in range(self.loops):
            t = threading.Thread(target=self._loop, name=f"delayq-{self.topic}-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: Optional[float] = None) -> None:
        """Graceful stop: no new poll; messages in hand are finished and acked."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        if self._pool:
            self._pool.shutdown(wait=False)

    def run(self) -> None:
        """Runs the loops in the foreground until :meth:`stop` (from another thread)."""
        self.start()
        for t in self._threads:
            t.join()

    def _handle(self, d: Delivery) -> bool:
        try:
            if self._pool is None:
                self.handler(d)
            else:
                self._pool.submit(self.handler, d).result(timeout=self.handler_timeout)
            return True
        except concurrent.futures.TimeoutError:
            log.warning("delayq: handler of message %s took over %s s; nacked", d.id, self.handler_timeout)
        except Exception:  # the handler's failure is the message's
            log.exception("delayq: handler of message %s failed; nacked", d.id)
        return False

    def _loop(self) -> None:
        done: List[Delivery] = []
        backoff = 0.1
        while True:
            stopping = self._stop.is_set()
            try:
                if stopping:
                    # The last acks, with no poll behind them.
                    for d in done:
                        self._ack_alone(d)
                    self.client.close()  # this thread's connections
                    return
                _, got = self.client.poll(
                    self.topic, count=self.batch, timeout_s=self.poll_timeout_s, ack=done
                )
                done = []
                backoff = 0.1
            except DelayqError as e:
                log.warning("delayq: poll of %s failed (%s); trying again", self.topic, e)
                if self._stop.wait(backoff):
                    continue
                backoff = min(backoff * 2, 5.0)
                continue
            for d in got:
                if self._handle(d):
                    done.append(d)
                else:
                    self._nack(d)

    def _ack_alone(self, d: Delivery) -> None:
        try:
            self.client.ack(d)
        except ApiError as e:
            log.warning("delayq: ack of %s refused: %s", d.id, e)
        except DelayqError as e:
            log.warning("delayq: ack of %s not sent (%s); it is handed out again after its ttl", d.id, e)

    def _nack(self, d: Delivery) -> None:
        try:
            self.client.nack(d, delay_ms=self.nack_delay_ms)
        except DelayqError as e:
            log.warning("delayq: nack of %s not taken (%s); it comes back after its ttl", d.id, e)
