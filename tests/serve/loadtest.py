"""loadtest.py — bounded loopback load on a running qserve (stdlib only).

Usage: python3 loadtest.py PORT SECONDS [CLIENTS=64] [DISCONNECT=0.1]
CLIENTS threads each loop: one streaming /v1/completions request (random prompt
words, max_tokens 16..128, ignore_eos), until SECONDS have passed. A DISCONNECT
share of requests hang up after their first few chunks on purpose (counted
apart, not failures). Every other request must answer 200 and end with
"data: [DONE]". At the end /metrics must show no KV block used and nothing in
flight. Prints one summary line per measure; exit 1 on any failure.
"""
import http.client
import json
import random
import sys
import threading
import time

PORT = int(sys.argv[1])
SECONDS = float(sys.argv[2])
CLIENTS = int(sys.argv[3]) if len(sys.argv) > 3 else 64
DISCONNECT = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
WORDS = "once upon a time there was a little girl named lily she loved to play outside in the park".split()

lock = threading.Lock()
stats = {"ok": 0, "failed": 0, "disconnected": 0, "tokens": 0}
ttft, itl, failures = [], [], []


def one(rng):
    body = json.dumps({"prompt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 40))),
                       "max_tokens": rng.randint(16, 128), "temperature": 0.8, "ignore_eos": True,
                       "stream": True})
    hang_after = rng.randint(1, 6) if rng.random() < DISCONNECT else None
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return "failed", "status %d: %s" % (r.status, r.read()[:200]), None, []
        first, last, gaps, events, done = None, None, [], 0, False
        for raw in r:
            line = raw.decode().rstrip("\n")
            if not line:
                continue
            if not line.startswith("data: "):
                return "failed", "bad line %r" % line[:100], None, []
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                return "failed", "error event %r" % ev, None, []
            now = time.monotonic()
            if first is None:
                first = now - t0
            elif last is not None:
                gaps.append(now - last)
            last = now
            events += 1
            if hang_after is not None and events >= hang_after:
                conn.sock.close()  # hang up mid-stream
                return "disconnected", None, first, gaps
        if not done:
            return "failed", "stream ended without [DONE]", None, []
        return "ok", None, first, gaps
    except Exception as e:  # a refused or reset connection is a failure
        return "failed", repr(e), None, []
    finally:
        conn.close()


def client(seed, deadline):
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        kind, why, first, gaps = one(rng)
        with lock:
            stats[kind] += 1
            if why:
                failures.append(why)
            if first is not None:
                ttft.append(first)
                itl.extend(gaps)


def metrics():
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split()
            vals[k] = float(v)
    return vals


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def main():
    m0 = metrics()
    t0 = time.monotonic()
    deadline = t0 + SECONDS
    threads = [threading.Thread(target=client, args=(i, deadline)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    m = {}
    for _ in range(100):  # the engine releases cancelled requests within a step
        m = metrics()
        if m.get("qserve_kv_blocks_used", -1) == 0 and m.get("qserve_requests_in_flight", -1) == 0:
            break
        time.sleep(0.1)
    gen = m.get("qserve_generation_tokens_total", 0) - m0.get("qserve_generation_tokens_total", 0)
    print("clients %d, %.0f s (wall %.1f s), disconnect share %.2f" % (CLIENTS, SECONDS, wall, DISCONNECT))
    print("requests: %d ok, %d failed, %d disconnected on purpose" % (stats["ok"], stats["failed"], stats["disconnected"]))
    print("generated tokens: %d (%.1f tokens/s)" % (gen, gen / wall))
    print("client TTFT ms: p50 %.1f p99 %.1f; inter-chunk ms: p50 %.2f p99 %.2f" %
          (1e3 * pct(ttft, 0.5), 1e3 * pct(ttft, 0.99), 1e3 * pct(itl, 0.5), 1e3 * pct(itl, 0.99)))
    print("after: kv blocks used %d of %d, in flight %d, cancelled %d, preemptions %d" %
          (m.get("qserve_kv_blocks_used", -1), m.get("qserve_kv_blocks_total", -1),
           m.get("qserve_requests_in_flight", -1), m.get("qserve_cancelled_total", -1),
           m.get("qserve_preemptions_total", -1)))
    for f in failures[:10]:
        print("failure:", f)
    bad = stats["failed"] or stats["ok"] == 0 or m.get("qserve_kv_blocks_used", -1) != 0 \
        or m.get("qserve_requests_in_flight", -1) != 0
    print("loadtest: %s" % ("FAILED" if bad else "passed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
