#!/usr/bin/env python3
"""Hostile clients for tests/scenarios/hostile/test_rest.py. Each function does one thing to a running
conduit-agent and returns one line of what it measured; on misbehaviour it raises HostileFailure (an
AssertionError) saying why. Standard library only. Also a command line, for poking an agent by hand
(`python3 tests/scenarios/hostile/clients.py bigbody URL TOKEN`): it prints the line, or why and exits 1.

  fixtures URL TOKEN              regions, a grant and a finished transfer for the state snapshot to cover
  snapshot URL TOKEN DATA_DIR     the agent's observable state as canonical JSON (volatile fields dropped)
  bigbody URL TOKEN               oversized bodies: by Content-Length, chunked, without a length, deeply nested
  traversal URL TOKEN DATA_DIR    file names that leave the data directory: .., absolute, symbolic links
  keys URL TOKEN COUNT            transfers to random remote keys: refused, or accepted and Failed
  slowloris URL CONNS SECONDS MAX_LATENCY CUT_WITHIN
                                  connections that send their headers one byte a second, while a client polls
  idle URL CONNS SECONDS MAX_LATENCY  connections that send nothing, while a client polls
  flood URL CONNS                 CONNS connections opened at once, each sending one request
"""

import asyncio
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

TIMEOUT = 15  # seconds any one call of ours may take before the agent counts as hung


class HostileFailure(AssertionError):
    """The agent misbehaved; the message says how, as the test's failure shows it."""


def fail(message):
    raise HostileFailure(message)


def split(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port


def call(url, method, path, token=None, body=None, headers=None, timeout=TIMEOUT):
    """(status, parsed JSON or raw text, headers) of one request on a fresh connection."""
    host, port = split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    conn.request(method, path, body=data, headers=h)
    res = conn.getresponse()
    raw = res.read()
    conn.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return res.status, parsed, res.headers


def expect(url, method, path, token, body, status, what):
    got, answer, _ = call(url, method, path, token, body)
    if got != status:
        fail(f"{what}: {method} {path} answered {got} {answer}, expected {status}")
    return answer


def healthy(url, within=TIMEOUT):
    """Seconds /healthz took to answer 200, or a failure."""
    started = time.monotonic()
    try:
        status, _, _ = call(url, "GET", "/healthz", timeout=within)
    except OSError as e:
        fail(f"/healthz did not answer within {within}s: {e}")
    if status != 200:
        fail(f"/healthz answered {status}")
    return time.monotonic() - started


# ---- fixtures and snapshot --------------------------------------------------------------------------------


def cmd_fixtures(url, token):
    expect(url, "POST", "/v1/regions", token, {"name": "fixture-src", "bytes": 65536}, 201, "fixture")
    expect(url, "POST", "/v1/regions", token, {"name": "fixture-dst", "bytes": 65536}, 201, "fixture")
    grant = expect(url, "POST", "/v1/regions/fixture-dst/grants", token,
                   {"access": "write", "ttlSeconds": 86400}, 201, "fixture")
    transfer = expect(url, "POST", "/v1/transfers", token,
                      {"source": {"region": "fixture-src"},
                       "targets": [{"grant": grant["key"], "url": url, "region": "fixture-dst"}],
                       "verify": "crc32c"}, 202, "fixture")
    deadline = time.monotonic() + TIMEOUT
    while True:
        state = expect(url, "GET", "/v1/transfers/" + transfer["id"], token, None, 200, "fixture")["state"]
        if state in ("Succeeded", "Failed", "Cancelled"):
            break
        if time.monotonic() > deadline:
            fail(f"fixture transfer {transfer['id']} still {state} after {TIMEOUT}s")
        time.sleep(0.05)
    if state != "Succeeded":
        fail(f"fixture transfer ended {state}")
    return f"fixtures: 2 regions, grant {grant['id']}, transfer {transfer['id']} {state}"


def cmd_snapshot(url, token, data_dir):
    """Everything a request could change, minus what changes by itself (the clock-driven throughput)."""
    regions = expect(url, "GET", "/v1/regions", token, None, 200, "snapshot")["items"]
    grants = expect(url, "GET", "/v1/grants", token, None, 200, "snapshot")["items"]
    transfers = expect(url, "GET", "/v1/transfers", token, None, 200, "snapshot")["items"]
    node = expect(url, "GET", "/v1/node", token, None, 200, "snapshot")
    for t in transfers:
        t.pop("throughputBytesPerSecond", None)
    files = []
    for root, dirs, names in os.walk(data_dir):
        for name in sorted(dirs + names):
            p = os.path.join(root, name)
            st = os.lstat(p)
            files.append([os.path.relpath(p, data_dir), st.st_mode, st.st_size, st.st_mtime_ns])
    snapshot = {
        "regions": sorted(regions, key=lambda r: r["name"]),
        "grants": sorted(grants, key=lambda g: g["id"]),
        "transfers": sorted(transfers, key=lambda t: t["id"]),
        "memoryUsed": node.get("memory", {}).get("used"),
        "files": sorted(files),
    }
    return json.dumps(snapshot, sort_keys=True, indent=1)


# ---- oversized and pathological bodies -------------------------------------------------------------------


def raw_exchange(url, head, body_chunks, timeout=60):
    """Sends `head` then each chunk of `body_chunks` (stopping quietly if the agent closes), reads the
    answer. Returns (status, body bytes, seconds)."""
    host, port = split(url)
    started = time.monotonic()
    s = socket.create_connection((host, port), timeout=timeout)
    answer = bytearray()
    done = threading.Event()

    def reader():
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                answer.extend(b)
        except OSError:
            pass
        done.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        s.sendall(head)
        for chunk in body_chunks:
            if done.is_set() and answer:
                break
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the agent answered and closed before taking the whole body: that is allowed
    t.join(timeout)
    s.close()
    text = bytes(answer)
    if not text.startswith(b"HTTP/1.1 "):
        fail(f"no HTTP answer (got {text[:80]!r}) after {time.monotonic() - started:.1f}s")
    status = int(text[9:12])
    head, _, body = text.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            extra = body[int(line.split(b":")[1]):]
            if extra:
                fail(f"more bytes after the answer (the unread body parsed as a request?): {extra[:60]!r}")
            body = body[:int(line.split(b":")[1])]
    return status, body, time.monotonic() - started


def error_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        fail(f"the answer is not a JSON error body: {body[:200]!r}")


def cmd_bigbody(url, token):
    size = 100 << 20
    mib = b"x" * (1 << 20)
    host, port = split(url)
    lines = []

    # 1. Content-Length says 100 MiB.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n").encode()
    status, body, secs = raw_exchange(url, head, (mib for _ in range(100)))
    if status != 413 or error_code(body) != "PayloadTooLarge":
        fail(f"100 MiB body by Content-Length: {status} {body[:200]!r}, expected 413 PayloadTooLarge")
    lines.append(f"Content-Length 100 MiB -> 413 in {secs:.1f}s")

    # 2. The same without a token: refused before the body is read.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    status, body, secs = raw_exchange(url, head, (mib for _ in range(100)))
    if status != 401:
        fail(f"100 MiB body without a token: {status}, expected 401")
    lines.append(f"no token -> 401 in {secs:.1f}s")

    # 3. Chunked, 100 MiB in 1 MiB chunks: no length to check up front.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"%x\r\n" % len(mib) + mib + b"\r\n"
    status, body, secs = raw_exchange(url, head, [chunk] * 100 + [b"0\r\n\r\n"])
    if status not in (411, 413):
        fail(f"100 MiB chunked body: {status} {body[:200]!r}, expected 411 or 413")
    lines.append(f"chunked 100 MiB -> {status} {error_code(body)} in {secs:.1f}s")

    # 4. A POST without Content-Length or chunking: its body would run until the connection closes.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nConnection: close\r\n\r\n").encode()
    status, body, secs = raw_exchange(url, head, (mib for _ in range(100)))
    if status not in (400, 411, 413):
        fail(f"100 MiB body without a length: {status} {body[:200]!r}, expected 411 or 413")
    lines.append(f"no length 100 MiB -> {status} {error_code(body)} in {secs:.1f}s")

    # 5. Nesting just under the 1 MiB limit: arrays, objects, and inside a field the parser reads.
    for name, text in [("arrays", "[" * 1000000),
                       ("objects", '{"a":' * 200000),
                       ("inside a field", '{"name":"x","bytes":' + "[" * 450000 + "]" * 450000 + "}"),
                       ("inside a grant", '{"source":{"region":"a"},"targets":[{"grant":' + "[" * 500000
                        + "]" * 500000 + "}]}")]:
        path = "/v1/transfers" if "grant" in name else "/v1/regions"
        status, answer, _ = call(url, "POST", path, token, text.encode())
        if status != 400:
            fail(f"deeply nested JSON ({name}): {status} {answer}, expected 400")
    lines.append("nesting 10^6 deep -> 400")
    healthy(url)
    return "; ".join(lines)


def make_room(url, token):
    """Revokes the grants and deletes the regions schemathesis left behind (it fills the memory cap), keeping
    the fixtures, so the checks after it can allocate."""
    for g in expect(url, "GET", "/v1/grants", token, None, 200, "cleanup")["items"]:
        if not g["region"].startswith("fixture-"):
            call(url, "DELETE", "/v1/grants/" + g["id"], token)
    for r in expect(url, "GET", "/v1/regions", token, None, 200, "cleanup")["items"]:
        if not r["name"].startswith("fixture-"):
            call(url, "DELETE", "/v1/regions/" + r["name"], token)


# ---- path traversal ---------------------------------------------------------------------------------------


def cmd_traversal(url, token, data_dir):
    make_room(url, token)
    outside = os.path.join(os.path.dirname(os.path.abspath(data_dir)), "outside")
    os.makedirs(outside, exist_ok=True)
    secret = os.path.join(outside, "secret.bin")
    with open(secret, "wb") as f:
        f.write(b"s" * 4096)
    os.symlink(outside, os.path.join(data_dir, "link-dir"))
    os.symlink(secret, os.path.join(data_dir, "link-file"))
    os.symlink("../outside/secret.bin", os.path.join(data_dir, "link-rel"))
    os.makedirs(os.path.join(data_dir, "sub"), exist_ok=True)
    os.symlink("../../outside", os.path.join(data_dir, "sub", "up"))
    before = sorted(os.listdir(outside))
    names = ["../outside/secret.bin", "/etc/passwd", os.path.abspath(secret), "sub/../../outside/secret.bin",
             "link-dir/secret.bin", "link-file", "link-rel", "sub/up/secret.bin", "./../outside/secret.bin",
             "..", ".", "/", "", "sub/", "a\u0000b", "link-dir/", "//etc/passwd", "sub/up/new.bin",
             "link-dir/new.bin", "../outside/new.bin", os.path.join(outside, "new.bin")]
    loads = saves = 0
    for n in names:
        status, answer, _ = call(url, "POST", "/v1/regions", token, {"name": "trav", "file": n})
        if status not in (400, 404) or not isinstance(answer, dict) or "error" not in answer:
            fail(f"load of {n!r}: {status} {answer}, expected 400")
        if status == 404 and not n.endswith("new.bin"):
            fail(f"load of {n!r}: 404 means the agent looked outside the data directory")
        loads += 1
    expect(url, "POST", "/v1/regions", token, {"name": "trav-src", "bytes": 4096}, 201, "traversal")
    for n in names:
        status, answer, _ = call(url, "POST", "/v1/regions/trav-src/save", token, {"file": n})
        if status != 400:
            fail(f"save to {n!r}: {status} {answer}, expected 400")
        saves += 1
    status, _, _ = call(url, "GET", "/v1/regions/trav", token)
    if status != 404:
        fail("a refused load left a region behind")
    after = sorted(os.listdir(outside))
    if after != before:
        fail(f"files appeared outside the data directory: {sorted(set(after) - set(before))}")
    with open(secret, "rb") as f:
        if f.read() != b"s" * 4096:
            fail("the file outside the data directory changed")
    # The control: a plain relative name inside works, so the refusals above are not a broken route.
    expect(url, "POST", "/v1/regions/trav-src/save", token, {"file": "sub/ok.bin"}, 200, "traversal")
    expect(url, "POST", "/v1/regions", token, {"name": "trav-ok", "file": "sub/ok.bin"}, 201, "traversal")
    expect(url, "DELETE", "/v1/regions/trav-ok", token, None, 204, "traversal")
    expect(url, "DELETE", "/v1/regions/trav-src", token, None, 204, "traversal")
    return f"{loads} loads and {saves} saves refused, nothing outside read or written"


# ---- remote keys that point nowhere -----------------------------------------------------------------------


def cmd_keys(url, token, count):
    """Transfers whose grant keys are random (addresses of every size, providers real and not, extreme
    ranges): each is refused with a 4xx or accepted and then fails with a reason; none succeeds or hangs."""
    import random
    rnd = random.Random(1)
    make_room(url, token)
    expect(url, "POST", "/v1/regions", token, {"name": "keys-src", "bytes": 65536}, 201, "keys")
    accepted, refused = [], 0
    for _ in range(int(count)):
        n = rnd.choice([1, 2, 4, 8, 16, 24, 28, 32, 64, 128, 200])
        key = {"provider": rnd.choice(["tcp;ofi_rxm", "tcp", "shm", "efa", "verbs;ofi_rxm", "x"]),
               "base": str(rnd.choice([0, 1, 2 ** 63, 2 ** 64 - 1 - 65536])),
               "length": rnd.choice([0, 1, 65536, 2 ** 40]),
               "rails": [{"address": bytes(rnd.randrange(256) for _ in range(n)).hex(),
                          "key": str(rnd.randrange(2 ** 64))} for _ in range(rnd.choice([1, 2, 3]))]}
        body = {"source": {"region": "keys-src"}, "targets": [{"grant": key}], "deadlineSeconds": 20}
        status, answer, _ = call(url, "POST", "/v1/transfers", token, body)
        if status == 202:
            accepted.append(answer["id"])
        elif 400 <= status < 500:
            refused += 1
        else:
            fail(f"transfer to a random key answered {status} {answer}")
    ends = {}
    deadline = time.monotonic() + 30
    for t in accepted:
        while True:
            answer = expect(url, "GET", "/v1/transfers/" + t, token, None, 200, "keys")
            if answer["state"] in ("Succeeded", "Failed", "Cancelled"):
                break
            if time.monotonic() > deadline:
                fail(f"transfer {t} to a random key still {answer['state']} after 30s")
            time.sleep(0.1)
        if answer["state"] != "Failed" or not answer["reason"]:
            fail(f"transfer {t} to a random key ended {answer['state']} ({answer['reason']!r})")
        ends[answer["reason"]] = ends.get(answer["reason"], 0) + 1
    expect(url, "DELETE", "/v1/regions/keys-src", token, None, 204, "keys")
    return (f"{refused} refused with a 4xx, {len(accepted)} accepted and Failed "
            f"({', '.join(f'{k} {v}' for k, v in sorted(ends.items()))})")


# ---- slow clients and many connections --------------------------------------------------------------------


async def slow_client(host, port, seconds, closed_after):
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        closed_after.append(0.0)
        return
    header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10000
    try:
        for i in range(len(header)):
            if time.monotonic() - started > seconds:
                break
            writer.write(header[i:i + 1])
            await writer.drain()
            try:
                # One byte a second. Any answer (an error status, or EOF when the agent closes) ends it.
                await asyncio.wait_for(reader.read(1), timeout=1.0)
                closed_after.append(time.monotonic() - started)
                break
            except asyncio.TimeoutError:
                pass
    except (ConnectionError, OSError):
        closed_after.append(time.monotonic() - started)
    writer.close()


async def poller(url, seconds, latencies):
    loop = asyncio.get_running_loop()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            status, _, _ = await loop.run_in_executor(None, lambda: call(url, "GET", "/healthz", timeout=TIMEOUT))
            latencies.append(time.monotonic() - t if status == 200 else float("inf"))
        except OSError:
            latencies.append(float("inf"))
        await asyncio.sleep(0.5)


async def slowloris(url, conns, seconds):
    host, port = split(url)
    closed_after, latencies = [], []
    await asyncio.gather(poller(url, seconds, latencies),
                         *(slow_client(host, port, seconds, closed_after) for _ in range(conns)))
    return closed_after, latencies


def cmd_slowloris(url, conns, seconds, max_latency, must_close_within):
    conns, seconds = int(conns), float(seconds)
    max_latency, must_close_within = float(max_latency), float(must_close_within)
    closed_after, latencies = asyncio.run(slowloris(url, conns, seconds))
    worst = max(latencies) if latencies else float("inf")
    if worst > max_latency:
        fail(f"{conns} slow clients: /healthz took up to {worst:.1f}s (limit {max_latency}s), "
             f"{len(latencies)} polls")
    if len(closed_after) < conns:
        fail(f"{conns - len(closed_after)} of {conns} slow clients were still connected after {seconds:.0f}s")
    late = max(closed_after)
    if late > must_close_within:
        fail(f"a slow client was cut only after {late:.1f}s (limit {must_close_within}s)")
    return (f"{conns} slow clients cut after {min(closed_after):.1f}-{late:.1f}s; "
            f"{len(latencies)} /healthz polls meanwhile, slowest {worst * 1000:.0f} ms")


async def idle(url, conns, seconds):
    host, port = split(url)
    opened, latencies = [], []
    for _ in range(conns):
        try:
            opened.append(await asyncio.wait_for(asyncio.open_connection(host, port), timeout=TIMEOUT))
        except (OSError, asyncio.TimeoutError):
            break
    await poller(url, seconds, latencies)
    # The agent closes an idle connection after its keep-alive timeout (5 s): each reads EOF by now.
    closed = 0
    for reader, writer in opened:
        try:
            if await asyncio.wait_for(reader.read(1), timeout=0.1) == b"":
                closed += 1
        except (OSError, asyncio.TimeoutError):
            pass
        writer.close()
    return len(opened), closed, latencies


def cmd_idle(url, conns, seconds, max_latency):
    conns, seconds, max_latency = int(conns), float(seconds), float(max_latency)
    opened, closed, latencies = asyncio.run(idle(url, conns, seconds))
    worst = max(latencies) if latencies else float("inf")
    if opened < conns:
        fail(f"only {opened} of {conns} idle connections could be opened")
    if worst > max_latency:
        fail(f"{conns} idle connections: /healthz took up to {worst:.1f}s (limit {max_latency}s)")
    if closed < conns:
        fail(f"{conns - closed} of {conns} idle connections were still open after {seconds:.0f}s")
    return (f"{conns} idle connections, all closed by the agent within {seconds:.0f}s; "
            f"{len(latencies)} /healthz polls meanwhile, slowest {worst * 1000:.0f} ms")


async def one_request(host, port, token, results, gate):
    await gate.wait()
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=TIMEOUT * 2)
        writer.write(f"GET /v1/regions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                     "Connection: close\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout=TIMEOUT * 2)
        writer.close()
        results.append((data[9:12], time.monotonic() - started))
    except (OSError, asyncio.TimeoutError) as e:
        results.append((type(e).__name__.encode(), time.monotonic() - started))


async def flood(url, token, conns):
    host, port = split(url)
    results, gate = [], asyncio.Event()
    tasks = [asyncio.create_task(one_request(host, port, token, results, gate)) for _ in range(conns)]
    await asyncio.sleep(0.1)
    gate.set()
    await asyncio.gather(*tasks)
    return results


def cmd_flood(url, token, conns, min_ok_fraction):
    conns = int(conns)
    started = time.monotonic()
    results = asyncio.run(flood(url, token, conns))
    took = time.monotonic() - started
    by_status = {}
    for status, _ in results:
        by_status[status.decode()] = by_status.get(status.decode(), 0) + 1
    ok = by_status.get("200", 0)
    slowest = max(t for _, t in results)
    after = healthy(url, within=5)
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(by_status.items()))
    if ok < conns * float(min_ok_fraction):
        fail(f"{conns} connections at once: only {ok} answered 200 ({summary}) in {took:.1f}s")
    return (f"{conns} connections at once in {took:.1f}s ({summary}; slowest {slowest:.1f}s); "
            f"/healthz {after * 1000:.0f} ms after")


def main():
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) >= 3 else ("", [])
    commands = {"fixtures": cmd_fixtures, "snapshot": cmd_snapshot, "bigbody": cmd_bigbody,
                "traversal": cmd_traversal, "keys": cmd_keys, "slowloris": cmd_slowloris, "idle": cmd_idle,
                "flood": cmd_flood}
    if cmd not in commands:
        print(__doc__)
        sys.exit(1)
    try:
        print(commands[cmd](*args))
    except HostileFailure as e:
        print(e)
        sys.exit(1)


if __name__ == "__main__":
    main()
