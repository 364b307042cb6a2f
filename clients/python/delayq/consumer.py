"""The consumer loop: the fast path by default.

Each loop long-polls ``POST /get/{topic}`` carrying the acks of the
messages its handler finished since the last poll (with their receipts),
so a burst costs one round trip per batch, not one per message. A handler
that raises nacks its message, which then follows the message's retry
policy (or is dead on its last attempt).

Batches fit the ttl: a loop asks for 10 messages at first, twice as many
(up to ``batch``) while a batch takes under an eighth of the messages'
ttl, and fewer when one takes over a quarter, so a slow handler does not
hold messages past their ttl. A message still in hand when its delivery
is about to lapse is not started (it is handed out again after its ttl),
and acks held for the next poll go on their own once half the ttl has
passed since the poll.

Semantics: **at least once**. A message whose handler finished but whose
ack did not reach the server (the process stopped, the node failed before
the next poll) is handed out again after its ttl; a handler that takes
longer than the ttl may see its message handed to another consumer, and
its late ack is refused (``stale_delivery``) and changes nothing. Make
handlers idempotent, and keep ``handler_timeout`` below the messages' ttl.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, List, Optional

from .client import Client, Delivery
from .errors import ApiError, DelayqError

log = logging.getLogger("delayq")

#: The first poll of a loop asks for this many messages (or ``batch``).
_FIRST_BATCH = 10


def _next_batch(want: int, got: int, spent: float, ttl: float, most: int) -> int:
    """The next poll's count: twice ``want`` (up to ``most``) when a full
    batch took under an eighth of the ttl, as many as fit a quarter of it
    when it took longer than that, ``want`` otherwise."""
    if spent > ttl / 4:
        return max(1, min(want, int(got * (ttl / 4) / spent)))
    if got >= want and spent < ttl / 8:
        return min(most, want * 2)
    return want


class Consumer:
    """Runs ``handler(delivery)`` on the messages of ``topic``.

    ``loops`` long polls run at once, each taking up to ``batch`` messages
    a poll (1 to 100; fewer while handlers are slow, see the module's
    doc) and handling them one after another (set ``loops`` to the
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
        batch: int = 100,
        poll_timeout_s: int = 5,
        handler_timeout: Optional[float] = None,
        nack_delay_ms: Optional[int] = None,
    ):
        if loops < 1 or not 1 <= batch <= 100 or not 1 <= poll_timeout_s <= 300:
            raise ValueError("loops must be at least 1, batch 1 to 100 and poll_timeout_s 1 to 300")
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

    def run(self) -> None:
        """Runs the loops in the foreground until :meth:`stop` (from another thread)."""
        self.start()
        for t in self._threads:
            t.join()

    def _handle(self, d: Delivery) -> bool:
        if self.handler_timeout is None:
            try:
                self.handler(d)
                return True
            except Exception:  # the handler's failure is the message's
                log.exception("delayq: handler of message %s failed; nacked", d.id)
                return False
        # A timed handler runs on a daemon thread of its own: one that
        # overruns is left to finish there (Python cannot stop it) and holds
        # up neither this loop nor the next handler, nor the process's exit.
        outcome: List[bool] = []

        def run() -> None:
            try:
                self.handler(d)
                outcome.append(True)
            except Exception:  # the handler's failure is the message's
                log.exception("delayq: handler of message %s failed; nacked", d.id)
                outcome.append(False)

        t = threading.Thread(target=run, name=f"delayq-handler-{d.id}", daemon=True)
        t.start()
        t.join(self.handler_timeout)
        if t.is_alive():
            log.warning("delayq: handler of message %s took over %s s; nacked", d.id, self.handler_timeout)
            return False
        return outcome == [True]

    def _loop(self) -> None:
        done: List[Delivery] = []
        backoff = 0.1
        want = min(_FIRST_BATCH, self.batch)
        while True:
            stopping = self._stop.is_set()
            try:
                if stopping:
                    # The last acks, with no poll behind them.
                    self._ack_alone(done)
                    self.client.close()  # this thread's connections
                    return
                sent = time.monotonic()
                results, got = self.client.poll(
                    self.topic, count=want, timeout_s=self.poll_timeout_s, ack=done
                )
                done = []
                backoff = 0.1
                for r in results:
                    if r.get("result") != "consumed":
                        log.warning("delayq: ack of %s: %s (status %s)", r.get("id"), r.get("result"), r.get("status"))
            except DelayqError as e:
                log.warning("delayq: poll of %s failed (%s); trying again", self.topic, e)
                if isinstance(e, ApiError) and not e.retryable and done:
                    # The poll was refused (bad input, not an outage): its
                    # acks go alone, once, lest they keep every poll refused.
                    self._ack_alone(done)
                    done = []
                if self._stop.wait(backoff):
                    continue
                backoff = min(backoff * 2, 5.0)
                continue
            if not got:
                continue
            ttl = min(d.ttl for d in got) / 1000.0
            started = time.monotonic()
            for d in got:
                now = time.monotonic()
                if now > sent + ttl - min(ttl / 10, 1.0):
                    log.warning(
                        "delayq: message %s not started: its delivery lapses (ttl %.1f s); it is handed out again",
                        d.id, ttl,
                    )
                    continue
                if done and now > sent + ttl / 2:
                    # Held acks must reach the server within the ttl.
                    self._ack_alone(done)
                    done = []
                if self._handle(d):
                    done.append(d)
                else:
                    self._nack(d)
            want = _next_batch(want, len(got), time.monotonic() - started, ttl, self.batch)

    def _ack_alone(self, done: List[Delivery]) -> None:
        for i in range(0, len(done), 100):
            part = done[i : i + 100]
            try:
                for r in self.client.ack_all(part):
                    if r.get("result") != "consumed":
                        log.warning("delayq: ack of %s: %s", r.get("id"), r.get("result"))
            except ApiError as e:
                log.warning("delayq: acks of %d messages refused: %s", len(part), e)
            except DelayqError as e:
                log.warning("delayq: acks of %d messages not sent (%s); they are handed out again after their ttl", len(part), e)

    def _nack(self, d: Delivery) -> None:
        try:
            self.client.nack(d, delay_ms=self.nack_delay_ms)
        except DelayqError as e:
            log.warning("delayq: nack of %s not taken (%s); it comes back after its ttl", d.id, e)
