"""The HTTP client: every route of delayq's API, over the standard library.

Every request is bounded by its own timeout. With several base URLs, a
node that answers 503 ``node_stalled`` (nothing applied) is skipped for
the next one; one that does not answer, or answers 502 or 504, too, but
for a push without a bizKey (it may have been applied: it is never sent
twice). Other answers (a 400, a 404, a 409) are the cluster's word and are
raised as :class:`ApiError`.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

from .errors import ApiError, TransportError

#: Answers that say "this node cannot serve now; another may".
_SKIP_STATUS = (502, 504)
_SKIP_CODES = ("node_stalled", "node_unavailable")
#: A kept-alive connection idle longer than this is closed, not reused:
#: the server may be closing it at the same moment.
_IDLE_S = 2.0


@dataclass
class Delivery:
    """A message handed to this consumer, with the receipt that names the delivery."""

    id: str
    topic: str
    body: str
    receipt: str
    attempts: int
    due_time: int
    biz_key: Optional[str] = None
    #: Its ordered group, if any.
    group: Optional[str] = None
    priority: int = 0
    #: ms this delivery may take before the message is handed out again.
    ttl: int = 30_000
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, m: dict) -> "Delivery":
        return cls(
            id=m["id"],
            topic=m["topic"],
            body=m["body"],
            receipt=m.get("receipt", ""),
            attempts=m.get("attempts", 0),
            due_time=m.get("dueTime", 0),
            biz_key=m.get("bizKey"),
            group=m.get("group"),
            priority=m.get("priority", 0),
            ttl=m.get("ttl") or 30_000,
            raw=m,
        )


#: ``dst`` values: which instant a local time means when the zone's clock
#: jumps over it (a gap) or passes it twice (a fold). Reject (the default)
#: refuses such a time with 400 ``invalid_delay``; earlier is a fold's first
#: pass, or a gap time read with the offset after the jump (Berlin's 02:30
#: on its spring day is 01:30 +01:00); later is a fold's second pass, or a
#: gap time read with the offset before the jump (03:30 +02:00).
DST_REJECT = "reject"
DST_EARLIER = "earlier"
DST_LATER = "later"

#: ``on_duplicate`` values: what a push (with a bizKey) does to the live
#: message of its topic holding that key. Keep (the default) leaves it as it
#: is; replace gives it the push's body, due time and priority, keeping its
#: id (debounce); extend moves only its due time, and only later.
ON_DUPLICATE_KEEP = "keep"
ON_DUPLICATE_REPLACE = "replace"
ON_DUPLICATE_EXTEND = "extend"

#: What a push with ``on_duplicate`` replace or extend did to the live
#: message (:attr:`Pushed.result`): it took the push's body, time and
#: priority; its due time moved later; extend to a time not later than its
#: own left it as it was; it was handed to a consumer and left alone.
DUPLICATE_REPLACED = "replaced"
DUPLICATE_EXTENDED = "extended"
DUPLICATE_NOT_LATER = "not_later"
DUPLICATE_IN_FLIGHT = "in_flight"


@dataclass
class Pushed:
    id: str
    #: A live message of the topic held the bizKey: ``id`` is that message's.
    duplicate: bool = False
    #: A duplicate pushed with ``on_duplicate`` replace or extend: what it did
    #: to the live message (``DUPLICATE_REPLACED``, ``DUPLICATE_EXTENDED``,
    #: ``DUPLICATE_NOT_LATER``, ``DUPLICATE_IN_FLIGHT``); None otherwise.
    result: Optional[str] = None
    #: With ``result``: the live message's due time now (epoch ms); None
    #: when it is in flight.
    due_time: Optional[int] = None


def message(
    topic: str,
    body: str,
    *,
    delay_ms: Optional[int] = None,
    deliver_at: Optional[int] = None,
    deliver_at_local: Optional[str] = None,
    tz: Optional[str] = None,
    dst: Optional[str] = None,
    biz_key: Optional[str] = None,
    priority: Optional[int] = None,
    ttl_ms: Optional[int] = None,
    max_attempts: Optional[int] = None,
    retry: Optional[dict] = None,
    repeat: Optional[dict] = None,
    on_duplicate: Optional[str] = None,
    group: Optional[str] = None,
) -> dict:
    """A message as ``POST /push`` takes it (fields left out take the server's defaults).

    The due time is one of ``delay_ms`` (ms from now), ``deliver_at`` (epoch
    ms) or ``deliver_at_local`` (a wall-clock time ``YYYY-MM-DDTHH:MM[:SS[.fff]]``,
    no offset) with ``tz`` (its IANA zone, e.g. ``Europe/Berlin``) and
    ``dst``: which instant a time means when the zone's clock jumps over it
    or passes it twice, :data:`DST_REJECT` (the default: 400
    ``invalid_delay``), :data:`DST_EARLIER` or :data:`DST_LATER`.

    ``on_duplicate`` (with ``biz_key`` only; 400 ``invalid_field``
    otherwise) says what the push does to a live message of the topic
    holding the key: :data:`ON_DUPLICATE_KEEP` (the default),
    :data:`ON_DUPLICATE_REPLACE` or :data:`ON_DUPLICATE_EXTEND`.

    ``group`` (1–256 characters) puts it in an ordered group of its topic:
    one message of the group is handed out at a time (the next once it is
    acked, dead or cancelled), in due order.
    """
    m: dict[str, Any] = {"topic": topic, "body": body}
    for key, value in (
        ("delay", delay_ms),
        ("deliverAt", deliver_at),
        ("deliverAtLocal", deliver_at_local),
        ("tz", tz),
        ("dst", dst),
        ("bizKey", biz_key),
        ("priority", priority),
        ("ttl", ttl_ms),
        ("maxAttempts", max_attempts),
        ("retry", retry),
        ("repeat", repeat),
        ("onDuplicate", on_duplicate),
        ("group", group),
    ):
        if value is not None:
            m[key] = value
    return m


def outbox_row(topic: str, body: str, **fields: Any) -> str:
    """The JSON text of a row of the transactional outbox's ``message`` column.

    Keyword fields as :func:`message` names them: the text is the message
    ``POST /push`` would take from :meth:`Client.push` with the same
    arguments. Insert it in the application's own transaction (PostgreSQL
    ``INSERT INTO delayq_outbox (message) VALUES (%s::json)``, MySQL
    ``... VALUES (%s)``); a delayq node started with ``--outbox-url`` pushes
    each committed row once. ``on_duplicate`` replace and extend are
    refused (``ValueError``): the server refuses them in an outbox row, so
    only :data:`ON_DUPLICATE_KEEP` or none is taken. See "Transactional
    enqueue: the outbox" in docs/src/operating.md.
    """
    m = message(topic, body, **fields)
    on_duplicate = m.get("onDuplicate")
    if on_duplicate is not None and on_duplicate != ON_DUPLICATE_KEEP:
        raise ValueError(
            f"on_duplicate {on_duplicate!r} is refused in an outbox row: only {ON_DUPLICATE_KEEP!r} or none")
    return json.dumps(m)


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection has been closed by the server
    (it is readable: the end of the stream, or bytes nobody asked for)."""
    if conn.sock is None:
        return True
    try:
        readable, _, _ = select.select([conn.sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _delivery_ref(d: "Delivery") -> dict:
    """A delivery as the ack routes take it: its id, and its receipt when it has one."""
    return {"id": d.id, "receipt": d.receipt} if d.receipt else {"id": d.id}


class Client:
    """A delayq cluster, reached at one or several base URLs (tried in turn).

    ``timeout`` bounds every request but long polls, which wait their own
    timeout plus ``timeout``. ``ca_file`` trusts a private CA for
    ``https://`` URLs; ``admin_token`` and ``read_token`` go as
    ``Authorization: Bearer`` to the routes that need them.
    """

    def __init__(
        self,
        urls: Union[str, Sequence[str]],
        *,
        timeout: float = 10.0,
        admin_token: Optional[str] = None,
        read_token: Optional[str] = None,
        ca_file: Optional[str] = None,
    ):
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise ValueError("give at least one base URL")
        self._nodes = [urllib.parse.urlsplit(u.rstrip("/")) for u in urls]
        for n in self._nodes:
            if n.scheme not in ("http", "https") or not n.hostname:
                raise ValueError(f"not an http(s) base URL: {urllib.parse.urlunsplit(n)}")
        self.timeout = timeout
        self.admin_token = admin_token
        self.read_token = read_token
        self._tls = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
        self._first = 0
        self._local = threading.local()

    # -- transport ---------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: Optional[str] = None,
        wait: float = 0.0,
        idempotent: bool = True,
    ) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        last: Optional[Exception] = None
        for k in range(len(self._nodes)):
            i = (self._first + k) % len(self._nodes)
            node = self._nodes[i]
            try:
                status, reply = self._send(node, method, path, payload, headers, self.timeout + wait, idempotent)
            except (OSError, http.client.HTTPException, socket.timeout) as e:
                last = TransportError(f"{node.netloc}: {e}")
                if not idempotent:
                    raise last from e
                continue
            if status < 400:
                if not isinstance(reply, dict):
                    # Not delayq's answer (a proxy's page?): what happened is unknown.
                    raise TransportError(f"{node.netloc} answered {status} without a JSON object: {str(reply)[:200]}")
                self._first = i
                return reply
            code = reply.get("error", "") if isinstance(reply, dict) else ""
            message = reply.get("message", "") if isinstance(reply, dict) else str(reply)
            error = ApiError(status, code or f"http_{status}", message)
            # 503 node_stalled/node_unavailable: nothing was applied, any
            # request may go to the next node. 502/504 (no node, or no answer
            # in time): it may have been applied, so only an idempotent one.
            if code in _SKIP_CODES or (status in _SKIP_STATUS and idempotent):
                last = error
                continue
            raise error
        assert last is not None
        raise last

    def _send(self, node, method, path, payload, headers, timeout, idempotent):
        """One request on this thread's kept-alive connection to ``node``.

        A connection idle for longer than ``_IDLE_S`` is not reused (the
        server may be closing it); a reused one that fails before any answer
        is replaced and the request sent once more only when it is
        idempotent, so an unkeyed push is never sent twice.
        """
        pool = self._local.__dict__.setdefault("conns", {})
        key = (node.scheme, node.netloc)
        kept = pool.pop(key, None)
        if kept is not None and (time.monotonic() - kept[1] > _IDLE_S or _closed_by_peer(kept[0])):
            kept[0].close()
            kept = None
        fresh = kept is None
        conn = self._connect(node, timeout) if fresh else kept[0]
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            conn.request(method, node.path + path, body=payload, headers=headers)
        except (ConnectionResetError, BrokenPipeError):
            # The request did not go out: the server had closed the kept
            # connection. A fresh one is safe for any request.
            conn.close()
            if fresh:
                raise
            return self._send(node, method, path, payload, headers, timeout, idempotent)
        except BaseException:
            conn.close()
            raise
        try:
            resp = conn.getresponse()
            text = resp.read()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            # Sent, and no answer: it may have been taken.
            conn.close()
            if fresh or not idempotent:
                raise
            return self._send(node, method, path, payload, headers, timeout, idempotent)
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            pool[key] = (conn, time.monotonic())
        try:
            reply = json.loads(text) if text else None
        except ValueError:
            reply = text.decode(errors="replace")
        return resp.status, reply

    def _connect(self, node, timeout):
        if node.scheme == "https":
            return http.client.HTTPSConnection(node.hostname, node.port, timeout=timeout, context=self._tls)
        return http.client.HTTPConnection(node.hostname, node.port, timeout=timeout)

    def close(self) -> None:
        """Closes this thread's kept-alive connections."""
        for conn, _ in self._local.__dict__.pop("conns", {}).values():
            conn.close()

    @staticmethod
    def _q(**params: Any) -> str:
        given = {k: v for k, v in params.items() if v is not None}
        return ("?" + urllib.parse.urlencode(given)) if given else ""

    # -- producing ---------------------------------------------------------

    def push(self, topic: str, body: str, **fields: Any) -> Pushed:
        """``POST /push``: answered once the message is durable.

        Keyword fields as :func:`message` names them. Without a bizKey a
        push is sent to one node only: when that node fails to answer the
        message may or may not be accepted (:class:`TransportError`).
        """
        m = message(topic, body, **fields)
        r = self._request("POST", "/push", m, token=self.admin_token, idempotent=m.get("bizKey") is not None)
        return Pushed(r["id"], bool(r.get("duplicate", False)), r.get("result"), r.get("dueTime"))

    def push_batch(self, messages: Iterable[dict]) -> list[Pushed]:
        """``POST /push/batch`` (1 to 1000 messages, see :func:`message`): all durable or none.

        A message answered as a duplicate and pushed with ``on_duplicate``
        replace or extend carries what it did in ``result`` and ``due_time``
        (the answer's ``updates``).
        """
        msgs = list(messages)
        idempotent = bool(msgs) and all(m.get("bizKey") is not None for m in msgs)
        r = self._request("POST", "/push/batch", {"messages": msgs}, token=self.admin_token, idempotent=idempotent)
        dup = set(r.get("duplicates", []))
        updates = {u["index"]: u for u in r.get("updates", [])}
        return [
            Pushed(i, n in dup, updates.get(n, {}).get("result"), updates.get(n, {}).get("dueTime"))
            for n, i in enumerate(r["ids"])
        ]

    def cancel(self, id: str) -> dict:
        """``POST /cancel`` of one message: ``{"deleted", "results": [{"id", "result"}]}``."""
        return self._request("POST", "/cancel", {"id": id}, token=self.admin_token)

    def cancel_ids(self, ids: Sequence[str]) -> dict:
        return self._request("POST", "/cancel", {"ids": list(ids)}, token=self.admin_token)

    def cancel_biz_key(self, topic: str, biz_key: str) -> dict:
        """The live message holding the key; :class:`ApiError` ``not_found`` when none does."""
        return self._request("POST", "/cancel", {"topic": topic, "bizKey": biz_key}, token=self.admin_token)

    def cancel_prefix(self, topic: str, prefix: str) -> dict:
        return self._request("POST", "/cancel", {"topic": topic, "bizKeyPrefix": prefix}, token=self.admin_token)

    def reschedule(
        self,
        ids: Sequence[str],
        *,
        delay_ms: Optional[int] = None,
        deliver_at: Optional[int] = None,
        deliver_at_local: Optional[str] = None,
        tz: Optional[str] = None,
        dst: Optional[str] = None,
        priority: Optional[int] = None,
    ) -> dict:
        """``POST /reschedule``: messages not handed out yet move and keep their ids.

        The new time as :func:`message` takes it (``delay_ms``, ``deliver_at``,
        or ``deliver_at_local`` with ``tz`` and ``dst``), and/or a new
        ``priority``; each result that moved carries its new ``dueTime``.
        """
        body: dict[str, Any] = {"ids": list(ids)}
        for key, value in (
            ("delay", delay_ms),
            ("deliverAt", deliver_at),
            ("deliverAtLocal", deliver_at_local),
            ("tz", tz),
            ("dst", dst),
            ("priority", priority),
        ):
            if value is not None:
                body[key] = value
        return self._request("POST", "/reschedule", body, token=self.admin_token)

    # -- looking -----------------------------------------------------------

    def message(self, id: str) -> dict:
        """``GET /messages/{id}``: the message, its status and its history."""
        return self._request("GET", f"/messages/{id}", token=self.read_token or self.admin_token)

    def search(self, topic: str, **params: Any) -> dict:
        """``GET /messages?topic=…`` with ``bizKey``, ``bizKeyPrefix``, ``status``, ``limit``, ``after``."""
        return self._request("GET", "/messages" + self._q(topic=topic, **params), token=self.read_token or self.admin_token)

    def topics(self) -> list[dict]:
        return self._request("GET", "/topics", token=self.read_token or self.admin_token)["topics"]

    def forecast(self, topic: Optional[str] = None, *, bucket: str = "1m", span: str = "24h") -> dict:
        """``GET /forecast`` (every topic) or ``GET /topics/{topic}/forecast``:
        how many messages fall due per ``bucket`` over ``span`` from now on,
        ``{"buckets": [{"at", "count"[, "low", "high"]}], "total", "exact", ...}``.
        A topic's bucket too large to read whole is an estimate with its 95 %
        interval (``low``, ``high``)."""
        path = "/forecast" if topic is None else f"/topics/{urllib.parse.quote(topic)}/forecast"
        return self._request("GET", path + self._q(bucket=bucket, span=span), token=self.read_token or self.admin_token)

    def pause(self, topic: str) -> dict:
        return self._request("POST", f"/topics/{urllib.parse.quote(topic)}/pause", token=self.admin_token)

    def resume(self, topic: str) -> dict:
        return self._request("POST", f"/topics/{urllib.parse.quote(topic)}/resume", token=self.admin_token)

    def dead(self, topic: str, *, limit: Optional[int] = None, after: Optional[str] = None) -> dict:
        return self._request("GET", f"/dead/{urllib.parse.quote(topic)}" + self._q(limit=limit, after=after), token=self.read_token or self.admin_token)

    def requeue(self, target: str) -> dict:
        """``POST /dead/{target}/requeue``: a dead message by id, or a topic's dead letters."""
        return self._request("POST", f"/dead/{urllib.parse.quote(target)}/requeue", token=self.admin_token)

    # -- consuming ---------------------------------------------------------

    def poll(
        self,
        topic: str,
        *,
        count: int = 1,
        timeout_s: int = 30,
        ack: Sequence[Delivery] = (),
    ) -> tuple[list[dict], list[Delivery]]:
        """``POST /get/{topic}``: acks ``ack`` (by their receipts), then long-polls.

        Returns the acks' results and the messages handed out.
        """
        if not 0 <= timeout_s <= 300:
            raise ValueError("timeout_s must be 0 to 300 seconds")
        body = {"ack": [_delivery_ref(d) for d in ack], "count": count}
        # The wait goes in the query, where a load balancer in front of the
        # nodes (cluster/nginx-proxy.conf) bounds the poll by it.
        r = self._request("POST", f"/get/{urllib.parse.quote(topic)}?timeout={int(timeout_s)}", body, wait=timeout_s)
        return r.get("results", []), [Delivery.of(m) for m in r.get("messages", [])]

    def ack(self, d: Delivery) -> dict:
        """``POST /ack/{id}?receipt=``: 409 ``stale_delivery`` when another delivery holds it now."""
        return self._request("POST", f"/ack/{d.id}" + self._q(receipt=d.receipt or None))

    def ack_all(self, ds: Sequence[Delivery]) -> list[dict]:
        """``POST /ack`` of up to 100 deliveries (by their receipts): a result each."""
        body = {"ids": [_delivery_ref(d) for d in ds]}
        return self._request("POST", "/ack", body).get("results", [])

    def nack(self, d: Delivery, *, delay_ms: Optional[int] = None) -> dict:
        """``POST /nack/{id}``: back to Delaying for ``delay_ms``, or by the message's retry policy."""
        return self._request("POST", f"/nack/{d.id}" + self._q(receipt=d.receipt or None, delay=delay_ms))
