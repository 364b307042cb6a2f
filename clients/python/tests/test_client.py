"""The Python client against a real delayq server and a real Redis.

Runs a ``redis-server`` and ``delayq serve`` (SQLite journal) of its own on
free ports: ``DELAYQ_BIN`` names the binary (default: the checkout's
``target/debug/delayq``). ``python3 -m unittest discover clients/python/tests``.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import json
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from delayq import (  # noqa: E402
    DST_EARLIER,
    DST_LATER,
    DUPLICATE_NOT_LATER,
    DUPLICATE_REPLACED,
    ERROR_CODES,
    ON_DUPLICATE_EXTEND,
    ON_DUPLICATE_REPLACE,
    ApiError,
    Client,
    Consumer,
    TransportError,
    message,
    outbox_row,
)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unchecked() -> ssl.SSLContext:
    """Only to ask whether a node is up: its certificate is not checked."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def private_ca(dir: str) -> dict:
    """A CA and a certificate for 127.0.0.1 signed by it, made with openssl."""
    f = lambda n: os.path.join(dir, n)  # noqa: E731

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=delayq test CA",
        "-keyout", f("ca.key"), "-out", f("ca.pem"))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", f("node.key"), "-out", f("node.csr"))
    with open(f("ext.cnf"), "w") as e:
        e.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", f("node.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial",
        "-days", "2", "-extfile", f("ext.cnf"), "-out", f("node.pem"))
    return {"ca": f("ca.pem"), "cert": f("node.pem"), "key": f("node.key")}


def now_ms() -> int:
    return int(time.time() * 1000)


class Server:
    """A Redis and a delayq node of the test's own."""

    def __init__(self, tls=None, args=()):
        self.dir = tempfile.mkdtemp(prefix="delayq-py-")
        self.tls = tls
        self.args = list(args)
        self.redis_port = free_port()
        self.redis = subprocess.Popen(
            ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.node = None
        self.start()

    def start(self):
        binary = os.environ.get("DELAYQ_BIN", os.path.join(ROOT, "target", "debug", "delayq"))
        self.log = open(os.path.join(self.dir, "node.log"), "ab")
        self.node = subprocess.Popen(
            [binary, "serve", "--bind", f"127.0.0.1:{self.port}",
             "--redis-url", f"redis://127.0.0.1:{self.redis_port}/0",
             "--database-url", f"sqlite://{self.dir}/journal.db", "--shards", "2"]
            + (["--tls-cert", self.tls["cert"], "--tls-key", self.tls["key"]] if self.tls else [])
            + self.args,
            stdout=self.log, stderr=self.log,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/ready", timeout=1, context=_unchecked()) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("delayq did not get ready; see " + self.log.name)

    def stop_node(self):
        self.node.terminate()
        self.node.wait(10)
        self.log.close()

    def close(self):
        for p in (self.node, self.redis):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = Client(cls.server.url, timeout=5)

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def test_push_consume_ack_none_early_none_twice(self):
        pushed_at = now_ms()
        msgs = [message("py-burst", str(i), delay_ms=200 + (i % 5) * 100) for i in range(200)]
        ids = [p.id for p in self.client.push_batch(msgs)]
        seen, lock, all_in = {}, threading.Lock(), threading.Event()

        def handle(d):
            with lock:
                self.assertNotIn(d.id, seen, "handed out twice")
                seen[d.id] = now_ms()
                if len(seen) == len(ids):
                    all_in.set()

        consumer = Consumer(self.client, "py-burst", handle, loops=2).start()
        self.assertTrue(all_in.wait(30), f"{len(seen)} of {len(ids)} delivered")
        consumer.stop(10)
        self.assertEqual(set(seen), set(ids))
        for i, id in enumerate(ids):
            self.assertGreaterEqual(seen[id], pushed_at + 200 + (i % 5) * 100, "early")
        # Every ack was carried: each message ends Consumed.
        deadline = time.time() + 10
        while time.time() < deadline:
            if all(self.client.message(i)["message"]["status"] == "Consumed" for i in ids[:20]):
                break
            time.sleep(0.1)
        for i in ids[:20]:
            self.assertEqual(self.client.message(i)["message"]["status"], "Consumed")

    def test_a_stale_receipt_is_refused(self):
        self.client.push("py-stale", "x", ttl_ms=300)
        _, (first,) = self.client.poll("py-stale", timeout_s=5)
        time.sleep(0.5)
        _, (second,) = self.client.poll("py-stale", timeout_s=5)
        self.assertEqual(first.id, second.id)
        with self.assertRaises(ApiError) as e:
            self.client.ack(first)
        self.assertEqual((e.exception.status, e.exception.code), (409, "stale_delivery"))
        self.assertEqual(self.client.ack(second)["status"], "Consumed")

    def test_a_failing_handler_nacks_and_the_retry_comes_back(self):
        self.client.push("py-nack", "x", retry={"delay": 100})
        calls = []

        def flaky(d):
            calls.append(d.attempts)
            if len(calls) == 1:
                raise RuntimeError("first try fails")

        consumer = Consumer(self.client, "py-nack", flaky, poll_timeout_s=1).start()
        deadline = time.time() + 20
        while len(calls) < 2 and time.time() < deadline:
            time.sleep(0.05)
        consumer.stop(10)
        self.assertEqual(calls[:2], [1, 2])

    def test_batches_fit_the_ttl_of_a_slow_handler(self):
        # 30 messages of 1 s ttl and a 60 ms handler: a whole batch of 30
        # handled in one go would take 1.8 s, past the ttl, and every ack
        # carried after it would come too late (each message handed out
        # twice). Batches that fit the ttl hand each out once.
        ids = [p.id for p in self.client.push_batch([message("py-slow", str(i), ttl_ms=1000) for i in range(30)])]
        seen, lock = [], threading.Lock()

        def slow(d):
            time.sleep(0.06)
            with lock:
                seen.append(d.id)

        consumer = Consumer(self.client, "py-slow", slow, loops=2, poll_timeout_s=1).start()
        deadline = time.time() + 30
        while len(set(seen)) < len(ids) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # a lapsed delivery would come back meanwhile
        consumer.stop(10)
        self.assertEqual(sorted(seen), sorted(ids), "each handled once")
        for i in ids:
            self.assertEqual(self.client.message(i)["message"]["status"], "Consumed")

    def test_a_handler_past_its_timeout_holds_up_no_other(self):
        # The first handler hangs for 3 s; with a 0.3 s timeout it is
        # nacked, and the four after it run at once and are acked.
        ids = [p.id for p in self.client.push_batch(
            [message("py-hang", str(i), retry={"delay": 60_000}) for i in range(5)])]
        ran, lock = [], threading.Lock()

        def handler(d):
            with lock:
                ran.append(d.body)
                first = len(ran) == 1
            if first:
                time.sleep(3)

        consumer = Consumer(self.client, "py-hang", handler, poll_timeout_s=1, handler_timeout=0.3).start()
        deadline = time.time() + 2.5
        while len(ran) < 5 and time.time() < deadline:
            time.sleep(0.02)
        consumer.stop(10)
        self.assertEqual(len(ran), 5, ran)
        statuses = sorted(self.client.message(i)["message"]["status"] for i in ids)
        self.assertEqual(statuses, ["Consumed"] * 4 + ["Delaying"])

    def test_cancel_reschedule_and_error_codes(self):
        p = self.client.push("py-manage", "x", delay_ms=600_000, biz_key="order-1")
        again = self.client.push("py-manage", "y", delay_ms=600_000, biz_key="order-1")
        self.assertEqual((again.id, again.duplicate), (p.id, True))
        r = self.client.reschedule([p.id], delay_ms=900_000)
        self.assertEqual(r["results"][0]["result"], "rescheduled")
        self.assertEqual(self.client.cancel(p.id)["results"][0]["result"], "deleted")
        with self.assertRaises(ApiError) as e:
            self.client.cancel_biz_key("py-manage", "order-1")
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))
        with self.assertRaises(ApiError) as e:
            self.client.push("py-manage", "x", delay_ms=-1)
        self.assertEqual(e.exception.code, "invalid_delay")
        self.assertIn("py-manage", [t["topic"] for t in self.client.topics()])

    def test_forecast(self):
        self.client.push("py-forecast", "x", delay_ms=1_800_000)
        f = self.client.forecast("py-forecast", bucket="20m", span="1h")
        self.assertEqual([b["count"] for b in f["buckets"]], [0, 1, 0])
        self.assertTrue(f["exact"])
        self.assertEqual(len(self.client.forecast(bucket="1h", span="2h")["buckets"]), 2)
        with self.assertRaises(ApiError) as e:
            self.client.forecast(bucket="0s")
        self.assertEqual((e.exception.status, e.exception.code), (400, "invalid_parameter"))

    def test_local_wall_clock_times_and_dst(self):
        # Berlin's clock jumps from 02:00 to 03:00 on 2027-03-28: 02:30 does
        # not exist, and is refused unless dst says which instant it means.
        gap = {"deliver_at_local": "2027-03-28T02:30:00", "tz": "Europe/Berlin"}
        with self.assertRaises(ApiError) as e:
            self.client.push("py-local", "x", **gap)
        self.assertEqual((e.exception.status, e.exception.code), (400, "invalid_delay"))
        p = self.client.push("py-local", "x", dst=DST_LATER, **gap)
        # 03:30 +02:00.
        self.assertEqual(self.client.message(p.id)["message"]["dueTime"], 1806197400000)
        # 2027-10-31 02:30 happens twice in Berlin; earlier is its first pass, 02:30 +02:00.
        r = self.client.reschedule(
            [p.id], deliver_at_local="2027-10-31T02:30:00", tz="Europe/Berlin", dst=DST_EARLIER)
        self.assertEqual(r["results"][0]["result"], "rescheduled")
        self.assertEqual(r["results"][0]["dueTime"], 1824942600000)
        self.client.cancel(p.id)

    def test_ordered_groups(self):
        a1 = self.client.push("py-groups", "a1", group="a")
        a2 = self.client.push("py-groups", "a2", group="a", delay_ms=5)
        free = self.client.push("py-groups", "free", delay_ms=5)
        got = []
        while len(got) < 2:
            got += self.client.poll("py-groups", timeout_s=2, count=10)[1]
        # One of group a at a time: a2 waits behind a1.
        self.assertEqual(sorted((d.body, d.group) for d in got), [("a1", "a"), ("free", None)])
        self.assertEqual(self.client.poll("py-groups", timeout_s=1, count=10)[1], [])
        # The topic list's counts are a few seconds old at most.
        deadline = time.monotonic() + 10
        while not any(t["topic"] == "py-groups" for t in self.client.topics()):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.2)
        groups = next(t for t in self.client.topics() if t["topic"] == "py-groups")["groups"]
        self.assertEqual(groups, {"active": 1, "waiting": 1, "held": 1})
        self.client.ack_all(got)
        _, nxt = self.client.poll("py-groups", timeout_s=5)
        self.assertEqual([d.id for d in nxt], [a2.id])
        self.client.ack(nxt[0])
        self.assertNotEqual(a1.id, free.id)
        with self.assertRaises(ApiError) as e:
            self.client.push("py-groups", "x", group="")
        self.assertEqual((e.exception.status, e.exception.code), (400, "invalid_group"))

    def test_on_duplicate_replace_and_extend(self):
        first = self.client.push("py-debounce", "v1", delay_ms=60_000, biz_key="k")
        self.assertFalse(first.duplicate)
        self.assertIsNone(first.result)
        asked = now_ms()
        again = self.client.push(
            "py-debounce", "v2", delay_ms=500, biz_key="k", on_duplicate=ON_DUPLICATE_REPLACE)
        self.assertEqual((again.id, again.duplicate, again.result), (first.id, True, DUPLICATE_REPLACED))
        self.assertIsNotNone(again.due_time)
        self.assertTrue(asked + 500 <= again.due_time <= now_ms() + 500, again)
        # The live message now holds v2 under its first id, due in 500 ms.
        _, got = self.client.poll("py-debounce", timeout_s=5)
        self.assertEqual([(d.id, d.body) for d in got], [(first.id, "v2")])
        self.assertGreaterEqual(now_ms(), again.due_time)
        self.assertEqual(self.client.ack(got[0])["status"], "Consumed")
        # Extend to a time sooner than the live message's: left as it was.
        held = self.client.push("py-debounce", "e", delay_ms=60_000, biz_key="k-extend")
        sooner = self.client.push(
            "py-debounce", "e", delay_ms=100, biz_key="k-extend", on_duplicate=ON_DUPLICATE_EXTEND)
        self.assertEqual((sooner.id, sooner.duplicate, sooner.result), (held.id, True, DUPLICATE_NOT_LATER))
        due = self.client.message(held.id)["message"]["dueTime"]
        self.assertEqual(sooner.due_time, due)
        # A batch answers the same in its updates.
        (b,) = self.client.push_batch(
            [message("py-debounce", "e", delay_ms=100, biz_key="k-extend", on_duplicate=ON_DUPLICATE_EXTEND)])
        self.assertEqual((b.id, b.duplicate, b.result, b.due_time), (held.id, True, DUPLICATE_NOT_LATER, due))
        # Without a bizKey there is no live message to act on: refused.
        with self.assertRaises(ApiError) as e:
            self.client.push("py-debounce", "x", on_duplicate=ON_DUPLICATE_REPLACE)
        self.assertEqual((e.exception.status, e.exception.code), (400, "invalid_field"))
        self.client.cancel(held.id)

    def test_an_outbox_row_is_the_message_push_sends(self):
        fields = dict(delay_ms=600_000, biz_key="order-42", priority=3, ttl_ms=20_000, max_attempts=4,
                      retry={"delay": 1000}, on_duplicate="keep")
        row = outbox_row("py-outbox", 'order "42" é', **fields)
        self.assertIsInstance(row, str)
        self.assertEqual(json.loads(row), message("py-outbox", 'order "42" é', **fields))
        self.assertEqual(json.loads(outbox_row("py-outbox", "x")), {"topic": "py-outbox", "body": "x"})
        # The server refuses replace and extend in an outbox row: so does the client.
        for refused in (ON_DUPLICATE_REPLACE, ON_DUPLICATE_EXTEND):
            with self.assertRaises(ValueError):
                outbox_row("py-outbox", "x", biz_key="k", on_duplicate=refused)
        # The row's text, as is, is a message POST /push takes.
        req = urllib.request.Request(self.server.url + "/push", data=row.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            self.assertEqual(r.status, 200)
            id = json.loads(r.read())["id"]
        self.assertTrue(id)
        got = self.client.message(id)["message"]
        self.assertEqual((got["topic"], got["body"], got.get("bizKey")), ("py-outbox", 'order "42" é', "order-42"))
        self.client.cancel(id)

    def test_a_second_url_serves_when_the_first_does_not_answer(self):
        dead = f"http://127.0.0.1:{free_port()}"
        c = Client([dead, self.server.url], timeout=2)
        p = c.push("py-failover", "x", biz_key="k-1")
        self.assertTrue(p.id)
        # Without a bizKey a push is not sent twice: the error says so.
        lone = Client([dead], timeout=2)
        with self.assertRaises(TransportError):
            lone.push("py-failover", "y")


class TlsTest(unittest.TestCase):
    def test_a_private_ca_and_the_tokens(self):
        pki_dir = tempfile.mkdtemp(prefix="delayq-py-ca-")
        pki = private_ca(pki_dir)
        server = Server(tls=pki, args=["--admin-token", "admin-secret", "--read-token", "read-secret"])
        try:
            admin = Client(server.url, timeout=5, ca_file=pki["ca"], admin_token="admin-secret")
            later = admin.push("py-tls", "secret", delay_ms=60_000)
            now = admin.push("py-tls", "secret")
            _, (d,) = admin.poll("py-tls", timeout_s=5)
            self.assertEqual(d.id, now.id)
            admin.ack(d)
            # The read token looks and may not act; the admin token acts.
            reader = Client(server.url, timeout=5, ca_file=pki["ca"], read_token="read-secret")
            self.assertEqual(reader.message(later.id)["message"]["body"], "secret")
            with self.assertRaises(ApiError) as e:
                reader.cancel(later.id)
            self.assertEqual(e.exception.code, "unauthorized")
            self.assertIn(e.exception.code, ERROR_CODES)
            self.assertEqual(admin.cancel(later.id)["deleted"], 1)
            # Without the CA the node's certificate is not trusted.
            with self.assertRaises(TransportError) as e:
                Client(server.url, timeout=5).topics()
            self.assertIn("CERTIFICATE", str(e.exception).upper())
        finally:
            server.close()
            shutil.rmtree(pki_dir, ignore_errors=True)


class RestartTest(unittest.TestCase):
    def test_the_consumer_rides_out_a_node_restart(self):
        server = Server()
        try:
            client = Client(server.url, timeout=3)
            got, lock = set(), threading.Lock()

            def handle(d):
                with lock:
                    got.add(d.body)

            consumer = Consumer(client, "py-restart", handle, poll_timeout_s=1).start()
            client.push_batch([message("py-restart", f"a{i}") for i in range(20)])
            deadline = time.time() + 20
            while len(got) < 20 and time.time() < deadline:
                time.sleep(0.05)
            server.stop_node()
            time.sleep(1)
            server.start()
            client.push_batch([message("py-restart", f"b{i}") for i in range(20)])
            deadline = time.time() + 30
            while len(got) < 40 and time.time() < deadline:
                time.sleep(0.05)
            consumer.stop(10)
            self.assertEqual(len(got), 40, sorted(got))
        finally:
            server.close()


if __name__ == "__main__":
    unittest.main()
