#!/usr/bin/env python3
"""docker/try's workload: the pair behind nginx, its active node killed.

A producer pushes messages with delays of 0-4 s through nginx before, during
and after the kill; a consumer long-polls and acks them. Halfway the active
node (the one `GET /admin/cluster` names leader) is killed with the command
given. Then it waits until everything pushed was delivered and acked and
checks: nothing lost, nothing early (by this host's clock: a delivery's
arrival is never before the push was sent plus its delay), nothing handed
out again after its ack was answered. Prints one JSON line; exits 1 on a
violation.
"""

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

TOPIC = "try"


def call(url, method="GET", body=None, timeout=10.0):
    """(status, JSON answer or None); status 0 when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--kill-cmd", required=True, help="{node}: the service to kill")
    ap.add_argument("--seconds", type=float, default=20.0, help="pushing, the kill halfway")
    ap.add_argument("--images-s", default=None)
    ap.add_argument("--build-s", default=None)
    ap.add_argument("--healthy-s", default=None)
    ap.add_argument("--total-since", type=float, default=None)
    a = ap.parse_args()
    base = a.url.rstrip("/")

    lock = threading.Lock()
    pushed = {}  # id -> (sent at, delay ms)
    push_errors = []
    delivered = {}  # id -> [arrival]
    acked = {}  # id -> when the ack was answered
    violations = []
    revived = []  # handed out again after its ack was answered
    stop_pushing = threading.Event()
    stop_consuming = threading.Event()

    def producer():
        n = 0
        while not stop_pushing.is_set():
            delay = random.randint(0, 4000)
            sent = time.time()
            for _ in range(20):
                status, ans = call(
                    f"{base}/push",
                    "POST",
                    {"topic": TOPIC, "delay": delay, "body": f"m{n}", "bizKey": f"try-{n}"},
                )
                if status == 200 and ans and ans.get("id"):
                    with lock:
                        pushed.setdefault(ans["id"], (sent, delay))
                    break
                # A push that may have applied is sent again with its
                # bizKey: a live duplicate answers the same id.
                time.sleep(0.25)
            else:
                push_errors.append(n)
            n += 1
            time.sleep(0.05)

    def consumer():
        while not stop_consuming.is_set():
            status, ans = call(f"{base}/get/{TOPIC}?timeout=1&count=20", timeout=5)
            now = time.time()
            if status != 200 or not ans:
                time.sleep(0.2)
                continue
            for m in ans.get("messages", []):
                mid = m["id"]
                with lock:
                    if mid in acked:
                        revived.append(f"{mid}: handed out again {now - acked[mid]:.3f} s after its ack was answered")
                    delivered.setdefault(mid, []).append(now)
                for _ in range(20):
                    st, _ = call(f"{base}/ack/{mid}?receipt={m['receipt']}", "POST")
                    if st == 200:
                        with lock:
                            acked.setdefault(mid, time.time())
                        break
                    if st == 409:  # a later delivery holds it: it comes back
                        break
                    time.sleep(0.25)

    def leader():
        """The node GET /admin/cluster names leader (None: no answer)."""
        status, ans = call(f"{base}/admin/cluster", timeout=3)
        return ans.get("leader") if status == 200 and ans else None

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    time.sleep(a.seconds / 2)
    node = leader()
    if not node:
        violations.append("GET /admin/cluster named no leader")
        node = "delayq-1"
    killed_at = time.time()
    out = subprocess.run(a.kill_cmd.replace("{node}", node), shell=True, capture_output=True, text=True)
    if out.returncode != 0:
        violations.append(f"the kill failed: {out.stderr.strip()}")
    # The standby leads when GET /admin/cluster names it.
    failover_s = None
    while time.time() - killed_at < 60:
        name = leader()
        if name and name != node:
            failover_s = round(time.time() - killed_at, 2)
            break
        time.sleep(0.2)
    rest = a.seconds / 2 - (time.time() - killed_at)
    if rest > 0:
        time.sleep(rest)
    stop_pushing.set()
    threads[0].join()
    # Everything pushed is delivered and acked within 60 s.
    deadline = time.time() + 60
    while time.time() < deadline:
        with lock:
            if all(i in acked for i in pushed):
                break
        time.sleep(0.5)
    time.sleep(2)  # anything handed out again after its ack shows now
    stop_consuming.set()
    threads[1].join()

    lost = [i for i in pushed if i not in delivered]
    unacked = [i for i in pushed if i in delivered and i not in acked]
    early = []
    late_after_kill = []
    for i, (sent, delay) in pushed.items():
        for at in delivered.get(i, []):
            if at < sent + delay / 1000.0:
                early.append(f"{i}: {1000 * (sent + delay / 1000.0 - at):.0f} ms early")
        if i in delivered:
            due = sent + delay / 1000.0
            if due >= killed_at - 1:
                late_after_kill.append(delivered[i][0] - due)
    twice = [i for i, ats in delivered.items() if len(ats) > 1]
    violations += [f"lost: {i}" for i in lost] + [f"early: {e}" for e in early]
    violations += [f"delivered {len(delivered[i])} times: {i}" for i in twice] + revived
    if push_errors:
        violations.append(f"{len(push_errors)} pushes answered no id in 20 tries")
    if failover_s is None:
        violations.append("the standby did not lead within 60 s")
    late_after_kill.sort()
    report = {
        "images_s": a.images_s and float(a.images_s),
        "build_s": a.build_s and float(a.build_s),
        "healthy_s": a.healthy_s and float(a.healthy_s),
        "killed": node,
        "failover_s": failover_s,
        "pushed": len(pushed),
        "delivered": len(delivered),
        "acked": len(acked),
        "lost": len(lost),
        "unacked": len(unacked),
        "early": len(early),
        "delivered_twice": len(twice),
        "handed_out_after_ack": len(revived),
        "lateness_due_after_kill_s": {
            "count": len(late_after_kill),
            "max": round(late_after_kill[-1], 2) if late_after_kill else None,
            "p50": round(late_after_kill[len(late_after_kill) // 2], 2) if late_after_kill else None,
        },
        "total_s": a.total_since and round(time.time() - a.total_since, 1),
        "violations": violations[:20],
    }
    print(json.dumps(report))
    sys.exit(1 if violations else 0)


if __name__ == "__main__":
    main()
