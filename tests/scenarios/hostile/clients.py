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
  hello URL CONNS SECONDS MAX_LATENCY CUT_WITHIN
                                  connections that send the first bytes of a TLS ClientHello and stop there
  idle URL CONNS SECONDS MAX_LATENCY [tcp]
                                  connections that send nothing, while a client polls (https: after the TLS
                                  handshake, or with "tcp" without one)
  flood URL CONNS                 CONNS connections opened at once, each sending one request
  tlserrors URL TOKEN CONNS [BEFORE AFTER [ENDED_HANDSHAKE]]
                                  (https) TLS records split across TCP segments, before and after CONNS
                                  connections that send a corrupt record, and (unless ENDED_HANDSHAKE is 0)
                                  after a stalled handshake ends
  certs URL STALLS STRANGERS SECONDS MAX_LATENCY CUT_WITHIN OTHER_CERT OTHER_KEY [TOKEN]
                                  (https with --client-ca-file) handshakes that stop where the agent asks for
                                  a client certificate, and certificates from another CA, while a client with
                                  the right one polls

An https:// URL is spoken to over TLS, trusting the CA file given to trust() (on the command line: the
environment's CONDUIT_HOSTILE_CA; without either, the system's CAs) and checking the certificate names the
URL's host. A client certificate given to trust() (on the command line: CONDUIT_HOSTILE_CERT and
CONDUIT_HOSTILE_KEY) goes with every TLS connection, except bigbody's check that a caller with neither it nor a
token is refused; with one, TOKEN may be "" (no Authorization header).
"""

import asyncio
import http.client
import json
import os
import socket
import ssl
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


_ca_file = os.environ.get("CONDUIT_HOSTILE_CA") or None
_client_cert = ((os.environ["CONDUIT_HOSTILE_CERT"], os.environ["CONDUIT_HOSTILE_KEY"])
                if os.environ.get("CONDUIT_HOSTILE_CERT") else None)
_contexts = {}


def trust(ca_file, client_cert=None):
    """Makes https:// URLs trust CA_FILE (a PEM file; None: the system's CAs) and, with CLIENT_CERT (a
    certificate file and its key file), present that certificate: then a caller needs no token."""
    global _ca_file, _client_cert
    _ca_file = os.fspath(ca_file) if ca_file is not None else None
    _client_cert = tuple(map(os.fspath, client_cert)) if client_cert is not None else None


def tls_context(url, anonymous=False):
    """None for an http:// URL; for https://, the client context that trusts the CA given to trust() and
    presents its client certificate, if any (ANONYMOUS: none)."""
    if urllib.parse.urlsplit(url).scheme != "https":
        return None
    cert = None if anonymous else _client_cert
    if (_ca_file, cert) not in _contexts:
        context = ssl.create_default_context(cafile=_ca_file)
        if cert is not None:
            context.load_cert_chain(*cert)
        _contexts[_ca_file, cert] = context
    return _contexts[_ca_file, cert]


def bearer(token):
    """The Authorization header line of a raw request: none without a token (the client certificate speaks)."""
    return f"Authorization: Bearer {token}\r\n" if token else ""


def call(url, method, path, token=None, body=None, headers=None, timeout=TIMEOUT):
    """(status, parsed JSON or raw text, headers) of one request on a fresh connection."""
    host, port = split(url)
    context = tls_context(url)
    if context is not None:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    else:
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


def raw_exchange(url, head, body_chunks, timeout=60, anonymous=False):
    """Sends `head` then each chunk of `body_chunks` (stopping quietly if the agent closes), reads the
    answer (ANONYMOUS: over TLS without the client certificate). Returns (status, body bytes, seconds)."""
    started = time.monotonic()
    context = tls_context(url, anonymous)
    if context is not None:
        text = tls_send_and_read(url, context, head, body_chunks, timeout)
    else:
        text = plain_send_and_read(url, head, body_chunks, timeout)
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


def plain_send_and_read(url, head, body_chunks, timeout):
    """raw_exchange over TCP: a thread reads while this one writes, then half-closes; what the agent sent."""
    host, port = split(url)
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
    return bytes(answer)


class TlsPipe:
    """TLS over a connected blocking socket, with the TLS state in memory (ssl.SSLObject): one thread may send
    while another receives (an ssl.SSLSocket must not be used from two threads at once; here only the
    in-memory encryption is serialized, under a lock, never a socket call)."""

    def __init__(self, sock, context, host):
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname=host)
        self.lock = threading.Lock()
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                b = self.sock.recv(65536)
                if not b:
                    raise ConnectionResetError("the agent closed the connection during the TLS handshake")
                self.incoming.write(b)
        self.sock.sendall(self.outgoing.read())

    def encrypt(self, data):
        """DATA as the TLS records to send, for a caller that sends them its own way."""
        with self.lock:
            self.tls.write(data)
            return self.outgoing.read()

    def sendall(self, data):
        self.sock.sendall(self.encrypt(data))

    def read_to_end(self):
        """Everything the agent sends until it ends the connection (or the socket's timeout)."""
        answer = bytearray()
        while True:
            b = self.recv()
            if not b:
                return bytes(answer)
            answer.extend(b)

    def recv(self):
        """The next decrypted bytes; b"" at the end (close_notify, EOF, reset or a TLS error)."""
        while True:
            with self.lock:
                try:
                    return self.tls.read(65536)
                except ssl.SSLWantReadError:
                    pass
                except (ssl.SSLError, OSError):
                    return b""
            try:
                b = self.sock.recv(65536)
            except OSError:
                b = b""
            with self.lock:
                if b:
                    self.incoming.write(b)
                else:
                    self.incoming.write_eof()

    def close_write(self):
        """Our close_notify, then TCP's half-close: the TLS 1.3 way to say "no more" and still read."""
        with self.lock:
            try:
                self.tls.unwrap()
            except (ssl.SSLError, OSError):
                pass  # the close_notify is written; the agent's own is not here yet
            wire = self.outgoing.read()
        self.sock.sendall(wire)
        self.sock.shutdown(socket.SHUT_WR)


def tls_send_and_read(url, context, head, body_chunks, timeout):
    """raw_exchange over TLS, as plain_send_and_read does it: a thread reads while this one writes, then
    closes its direction (close_notify and a TCP half-close); what the agent sent, decrypted."""
    host, port = split(url)
    s = socket.create_connection((host, port), timeout=timeout)
    try:
        pipe = TlsPipe(s, context, host)
    except (OSError, ssl.SSLError):
        s.close()
        return b""
    answer = bytearray()
    done = threading.Event()

    def reader():
        while True:
            b = pipe.recv()
            if not b:
                break
            answer.extend(b)
        done.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        pipe.sendall(head)
        for chunk in body_chunks:
            if done.is_set() and answer:
                break
            pipe.sendall(chunk)
        pipe.close_write()
    except OSError:
        pass  # the agent answered and closed before taking the whole body: that is allowed
    t.join(timeout)
    s.close()
    return bytes(answer)


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
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\n{bearer(token)}"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n").encode()
    status, body, secs = raw_exchange(url, head, (mib for _ in range(100)))
    if status != 413 or error_code(body) != "PayloadTooLarge":
        fail(f"100 MiB body by Content-Length: {status} {body[:200]!r}, expected 413 PayloadTooLarge")
    lines.append(f"Content-Length 100 MiB -> 413 in {secs:.1f}s")

    # 2. The same without a token or a client certificate: refused before the body is read.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    status, body, secs = raw_exchange(url, head, (mib for _ in range(100)), anonymous=True)
    if status != 401:
        fail(f"100 MiB body without a token or certificate: {status}, expected 401")
    lines.append(f"no credentials -> 401 in {secs:.1f}s")

    # 3. Chunked, 100 MiB in 1 MiB chunks: no length to check up front.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\n{bearer(token)}"
            f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"%x\r\n" % len(mib) + mib + b"\r\n"
    status, body, secs = raw_exchange(url, head, [chunk] * 100 + [b"0\r\n\r\n"])
    if status not in (411, 413):
        fail(f"100 MiB chunked body: {status} {body[:200]!r}, expected 411 or 413")
    lines.append(f"chunked 100 MiB -> {status} {error_code(body)} in {secs:.1f}s")

    # 4. A POST without Content-Length or chunking: its body would run until the connection closes.
    head = (f"POST /v1/regions HTTP/1.1\r\nHost: {host}\r\n{bearer(token)}"
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


async def slow_client(host, port, seconds, closed_after, context=None):
    """Headers a byte a second (over TLS with CONTEXT: after a full handshake). The seconds from connecting
    to the agent ending it go to CLOSED_AFTER."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=context)
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


async def poller(url, seconds, latencies, path="/healthz"):
    """GET PATH (no token: a route other than the probes needs the client certificate) every 0.5 s on a fresh
    connection; each one's seconds to a 200 (inf: any other end) go to LATENCIES."""
    loop = asyncio.get_running_loop()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        try:
            status, _, _ = await loop.run_in_executor(None, lambda: call(url, "GET", path, timeout=TIMEOUT))
            latencies.append(time.monotonic() - t if status == 200 else float("inf"))
        except OSError:
            latencies.append(float("inf"))
        await asyncio.sleep(0.5)


async def until_closed(reader, started, seconds, closed_after):
    """Reads whatever the agent sends until it ends the connection (EOF: the seconds since STARTED go to
    CLOSED_AFTER) or SECONDS have passed since STARTED (nothing added)."""
    while time.monotonic() - started < seconds:
        left = seconds - (time.monotonic() - started)
        try:
            if await asyncio.wait_for(reader.read(4096), timeout=max(left, 0.01)) == b"":
                closed_after.append(time.monotonic() - started)
                return
        except asyncio.TimeoutError:
            pass


# The first 6 bytes of a TLS ClientHello: a handshake record (0x16, TLS 1.0 record version) of 0x200 bytes
# whose first message is a ClientHello (0x01). The agent waits for the other 507 that never come.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01"


async def stalled_hello_client(host, port, seconds, closed_after):
    """A TCP connection that sends the start of a ClientHello and nothing more; the seconds until the agent
    ends it (EOF, a reset, or an alert and then EOF) go to CLOSED_AFTER."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        closed_after.append(0.0)
        return
    try:
        writer.write(PARTIAL_CLIENT_HELLO)
        await writer.drain()
        await until_closed(reader, started, seconds, closed_after)
    except (ConnectionError, OSError):
        closed_after.append(time.monotonic() - started)
    writer.close()


async def slowloris(url, conns, seconds, stalled_hello=False):
    host, port = split(url)
    closed_after, latencies = [], []
    context = tls_context(url)

    def client():
        if stalled_hello:
            return stalled_hello_client(host, port, seconds, closed_after)
        return slow_client(host, port, seconds, closed_after, context)

    await asyncio.gather(poller(url, seconds, latencies), *(client() for _ in range(conns)))
    return closed_after, latencies


def judge_slow(what, one, conns, seconds, max_latency, must_close_within, closed_after, latencies,
               polled="/healthz"):
    """The verdict on CONNS slow clients (WHAT, and ONE of them, as the lines name them): POLLED answered
    within MAX_LATENCY all along and every one was cut within MUST_CLOSE_WITHIN seconds; the line of what was
    measured."""
    worst = max(latencies) if latencies else float("inf")
    if worst > max_latency:
        fail(f"{conns} {what}: {polled} took up to {worst:.1f}s (limit {max_latency}s), "
             f"{len(latencies)} polls")
    if len(closed_after) < conns:
        fail(f"{conns - len(closed_after)} of {conns} {what} were still connected after {seconds:.0f}s")
    late = max(closed_after)
    if late > must_close_within:
        fail(f"{one} was cut only after {late:.1f}s (limit {must_close_within}s)")
    return (f"{conns} {what} cut after {min(closed_after):.1f}-{late:.1f}s; "
            f"{len(latencies)} {polled} polls meanwhile, slowest {worst * 1000:.0f} ms")


def cmd_slowloris(url, conns, seconds, max_latency, must_close_within):
    """Headers a byte a second; over https after a complete TLS handshake."""
    conns, seconds = int(conns), float(seconds)
    max_latency, must_close_within = float(max_latency), float(must_close_within)
    closed_after, latencies = asyncio.run(slowloris(url, conns, seconds))
    return judge_slow("slow clients", "a slow client", conns, seconds, max_latency, must_close_within,
                      closed_after, latencies)


def cmd_hello(url, conns, seconds, max_latency, must_close_within):
    """Connections stalled in the TLS handshake: the first bytes of a ClientHello, then nothing (the agent's
    request deadline covers the handshake). Meant for an https:// URL (the /healthz polls speak TLS)."""
    conns, seconds = int(conns), float(seconds)
    max_latency, must_close_within = float(max_latency), float(must_close_within)
    closed_after, latencies = asyncio.run(slowloris(url, conns, seconds, stalled_hello=True))
    return judge_slow("stalled TLS handshakes", "a stalled TLS handshake", conns, seconds, max_latency,
                      must_close_within, closed_after, latencies)


# ---- client certificates: a handshake stalled where the agent asked for one, one from another CA ----------

# TLS 1.2 handshake message types (RFC 5246, 7.4): the agent's flight ends with ServerHelloDone, and includes a
# CertificateRequest when it asks for a client certificate.
CERTIFICATE_REQUEST, SERVER_HELLO_DONE = 13, 14


async def server_flight(reader):
    """The types of the handshake messages the agent sends up to ServerHelloDone; fewer if it sends anything
    else (an alert) or ends the connection."""
    types, stream = [], b""
    try:
        while SERVER_HELLO_DONE not in types:
            header = await reader.readexactly(5)
            record = await reader.readexactly(int.from_bytes(header[3:5], "big"))
            if header[0] != 22:  # not a handshake record
                break
            stream += record
            # Handshake messages: a type byte and a 3-byte length; one may span records.
            while len(stream) >= 4 and len(stream) >= 4 + int.from_bytes(stream[1:4], "big"):
                types.append(stream[0])
                stream = stream[4 + int.from_bytes(stream[1:4], "big"):]
    except (asyncio.IncompleteReadError, OSError):
        pass
    return types


async def cert_request_stall_client(host, port, hello_context, seconds, closed_after, asked):
    """A complete ClientHello, offering TLS 1.2 only; the agent's answer read up to ServerHelloDone (a
    CertificateRequest in it goes to ASKED); then nothing, as a client that never finds its certificate. The
    seconds until the agent ends the connection go to CLOSED_AFTER. TLS 1.2 because there the CertificateRequest
    travels in the clear (1.3 encrypts it; the agent waits for the certificate the same way)."""
    started = time.monotonic()
    outgoing = ssl.MemoryBIO()
    tls = hello_context.wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname=host)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass  # the ClientHello is written; the rest would need the agent's answer, which this client ignores
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        closed_after.append(0.0)
        return
    try:
        writer.write(outgoing.read())
        await writer.drain()
        if CERTIFICATE_REQUEST in await asyncio.wait_for(server_flight(reader), timeout=seconds):
            asked.append(time.monotonic() - started)
        await until_closed(reader, started, seconds, closed_after)
    except asyncio.TimeoutError:
        pass  # no ServerHelloDone within SECONDS: counted as neither asked nor closed (before OSError: from
        # Python 3.11 this is the built-in TimeoutError, an OSError)
    except (ConnectionError, OSError):
        closed_after.append(time.monotonic() - started)
    writer.close()


async def stranger_client(host, port, context, token, delay, outcomes):
    """After DELAY seconds, a handshake presenting CONTEXT's certificate (from a CA the agent does not trust),
    then a request with TOKEN, which must not let it in either. How it ended goes to OUTCOMES: the TLS alert's
    reason, "closed", "reset", "hung", or "answered NNN" (let in)."""
    await asyncio.sleep(delay)
    writer = None
    try:
        # In TLS 1.3 the client's side of the handshake completes before the agent has seen the certificate:
        # the refusal comes as an alert in place of the answer.
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), timeout=TIMEOUT)
        writer.write(f"GET /v1/regions HTTP/1.1\r\nHost: x\r\n{bearer(token)}Connection: close\r\n\r\n"
                     .encode())
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=TIMEOUT)
        outcomes.append(f"answered {answer[9:12].decode(errors='replace')}" if answer.startswith(b"HTTP/1.1 ")
                        else "closed")
    except ssl.SSLError as e:
        outcomes.append(e.reason or "TLS error")
    except asyncio.TimeoutError:
        outcomes.append("hung")
    except OSError:
        outcomes.append("reset")
    if writer is not None:
        writer.close()


async def certificates(url, stalls, strangers, seconds, stranger_context, token):
    host, port = split(url)
    closed_after, asked, outcomes, latencies = [], [], [], []
    hello_context = ssl.create_default_context(cafile=_ca_file)
    hello_context.maximum_version = ssl.TLSVersion.TLSv1_2
    # The strangers come one by one from 1 s in, while the stalled handshakes are held.
    await asyncio.gather(poller(url, seconds, latencies, path="/v1/regions"),
                         *(cert_request_stall_client(host, port, hello_context, seconds, closed_after, asked)
                           for _ in range(stalls)),
                         *(stranger_client(host, port, stranger_context, token, 1 + i * 0.05, outcomes)
                           for i in range(strangers)))
    return closed_after, asked, outcomes, latencies


def cmd_certs(url, stalls, strangers, seconds, max_latency, must_close_within, other_cert, other_key, token=""):
    """For an agent that asks for client certificates (--client-ca-file): STALLS handshakes that stop where the
    agent asked for a certificate, each cut within MUST_CLOSE_WITHIN seconds, and STRANGERS that present
    OTHER_CERT (signed by another CA) and TOKEN, each refused in the handshake; meanwhile a client with the
    certificate given to trust() is answered GET /v1/regions (no token) within MAX_LATENCY."""
    stalls, strangers, seconds = int(stalls), int(strangers), float(seconds)
    max_latency, must_close_within = float(max_latency), float(must_close_within)
    if tls_context(url) is None:
        fail("certs needs an https:// URL")
    stranger_context = ssl.create_default_context(cafile=_ca_file)
    stranger_context.load_cert_chain(other_cert, other_key)
    closed_after, asked, outcomes, latencies = asyncio.run(
        certificates(url, stalls, strangers, seconds, stranger_context, token))
    if len(asked) < stalls:
        fail(f"{stalls - len(asked)} of {stalls} TLS 1.2 handshakes got no CertificateRequest from the agent")
    counts = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    not_refused = sum(v for k, v in counts.items() if k.startswith("answered") or k == "hung")
    if not_refused or len(outcomes) < strangers:
        fail(f"{strangers} clients with a certificate from another CA: not all refused in the handshake ({summary})")
    line = judge_slow("handshakes stalled after the agent's CertificateRequest",
                      "a handshake stalled after the CertificateRequest", stalls, seconds, max_latency,
                      must_close_within, closed_after, latencies, polled="/v1/regions (client certificate)")
    return f"{line}; {strangers} certificates from another CA refused in the handshake ({summary})"


async def idle(url, conns, seconds, context=None):
    host, port = split(url)
    opened, latencies = [], []
    for _ in range(conns):
        try:
            opened.append(await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context),
                                                 timeout=TIMEOUT))
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


def cmd_idle(url, conns, seconds, max_latency, tcp_only=False):
    """CONNS connections that send nothing, each closed by the agent within SECONDS of the last one opening.
    Over https the client completes the TLS handshake first, unless TCP_ONLY (then it is a bare TCP
    connection to the TLS port, not one byte sent)."""
    conns, seconds, max_latency = int(conns), float(seconds), float(max_latency)
    tcp_only = tcp_only in (True, "tcp", "1", "true")
    context = None if tcp_only else tls_context(url)
    what = "idle connections"
    if tls_context(url) is not None:
        what = "idle TCP connections (no TLS handshake)" if tcp_only else "idle TLS connections (handshake done)"
    opened, closed, latencies = asyncio.run(idle(url, conns, seconds, context))
    worst = max(latencies) if latencies else float("inf")
    if opened < conns:
        fail(f"only {opened} of {conns} {what} could be opened")
    if worst > max_latency:
        fail(f"{conns} {what}: /healthz took up to {worst:.1f}s (limit {max_latency}s)")
    if closed < conns:
        fail(f"{conns - closed} of {conns} {what} were still open after {seconds:.0f}s")
    return (f"{conns} {what}, all closed by the agent within {seconds:.0f}s; "
            f"{len(latencies)} /healthz polls meanwhile, slowest {worst * 1000:.0f} ms")


async def one_request(host, port, token, results, gate, context=None):
    await gate.wait()
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context),
                                                timeout=TIMEOUT * 2)
        writer.write(f"GET /v1/regions HTTP/1.1\r\nHost: x\r\n{bearer(token)}Connection: close\r\n\r\n"
                     .encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout=TIMEOUT * 2)
        writer.close()
        results.append((data[9:12], time.monotonic() - started))
    except (OSError, asyncio.TimeoutError) as e:
        results.append((type(e).__name__.encode(), time.monotonic() - started))


async def flood(url, token, conns):
    host, port = split(url)
    results, gate = [], asyncio.Event()
    context = tls_context(url)
    tasks = [asyncio.create_task(one_request(host, port, token, results, gate, context)) for _ in range(conns)]
    await asyncio.sleep(0.1)
    gate.set()
    await asyncio.gather(*tasks)
    return results


# ---- TLS records in pieces, and TLS errors before them ---------------------------------------------------


def tls_connect(url):
    """A TlsPipe to the agent with the handshake done."""
    host, port = split(url)
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    try:
        return TlsPipe(s, tls_context(url), host)
    except BaseException:
        s.close()
        raise


def answer_status(answer):
    return int(answer[9:12]) if answer.startswith(b"HTTP/1.1 ") else f"no answer ({answer[:40]!r})"


def split_record_request(url, token, name):
    """POST /v1/regions NAME whose body comes in its own TLS record, after the headers have gone to a worker,
    that record split across two TCP sends 0.1 s apart (as a slow link delivers a record): the agent must
    wait for the rest of it. The answer's status (or why there is none)."""
    pipe = tls_connect(url)
    try:
        body = json.dumps({"name": name, "bytes": 4096}).encode()
        pipe.sendall(f"POST /v1/regions HTTP/1.1\r\nHost: x\r\n{bearer(token)}"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode())
        time.sleep(0.05)
        wire = pipe.encrypt(body)
        pipe.sock.sendall(wire[:3])
        time.sleep(0.1)
        pipe.sock.sendall(wire[3:])
        return answer_status(pipe.read_to_end())
    finally:
        pipe.sock.close()


def corrupt_record(url, token):
    """Headers of a POST with a 20-byte body, then a record the agent cannot decrypt as that body."""
    pipe = tls_connect(url)
    try:
        pipe.sendall(f"POST /v1/regions HTTP/1.1\r\nHost: x\r\n{bearer(token)}"
                     "Content-Type: application/json\r\nContent-Length: 20\r\n\r\n".encode())
        time.sleep(0.02)
        pipe.sock.sendall(b"\x17\x03\x03\x00\x30" + os.urandom(0x30))
        pipe.read_to_end()  # an alert, or nothing: the agent ends the connection either way
    finally:
        pipe.sock.close()


def cmd_tlserrors(url, token, conns, before=20, after=64, ended_handshake=True):
    """A TLS error on one connection must not touch the next. Requests whose body record arrives in two
    pieces are answered 201, BEFORE of them before and AFTER after CONNS connections that sent a corrupt
    record (each failed on a request thread: more connections than the agent has request threads), and (unless
    ENDED_HANDSHAKE is false: it takes 9 s) on a connection that waits in the gate while a stalled handshake
    there is ended by the deadline (no /healthz polls meanwhile: each handshake would hide what this looks
    for)."""
    if tls_context(url) is None:
        fail("tlserrors needs an https:// URL")
    conns, before, after = int(conns), int(before), int(after)
    make_room(url, token)
    made, lines, sent = [], [], [0]

    def requests(what, n):
        statuses = {}
        for _ in range(n):
            sent[0] += 1
            name = f"tlsrec-{sent[0]}"
            status = split_record_request(url, token, name)
            if status == 201:
                made.append(name)
            statuses[status] = statuses.get(status, 0) + 1
        if statuses.get(201, 0) != n:
            fail(f"split TLS records {what}: {n - statuses.get(201, 0)} of {n} requests not answered 201 "
                 f"({', '.join(f'{k}: {v}' for k, v in statuses.items())})")
        lines.append(f"{n}/{n} split-record requests answered 201 {what}")

    requests("before the corrupt records", before)
    for _ in range(conns):
        corrupt_record(url, token)
    requests(f"after {conns} corrupt records", after)
    if ended_handshake not in (False, "0", "false", "no"):
        status = split_record_after_ended_handshake(url)
        if status != 200:
            fail(f"a split-record request on a connection waiting while a stalled handshake was ended: {status}, "
                 "expected 200")
        lines.append("a split-record /healthz after a stalled handshake was ended -> 200")
    for name in made:
        call(url, "DELETE", "/v1/regions/" + name, token)
    return "; ".join(lines)


def split_record_after_ended_handshake(url):
    """In the gate: a connection stalls in its handshake; 8.5 s on (its deadline is at 10), another completes
    its handshake; once the first has been ended, the second sends GET /healthz in a split record. The
    answer's status."""
    host, port = split(url)
    stalled = socket.create_connection((host, port), timeout=TIMEOUT)
    stalled.sendall(PARTIAL_CLIENT_HELLO)
    time.sleep(8.5)
    waiting = tls_connect(url)
    try:
        try:
            while stalled.recv(4096):
                pass
        except OSError:
            pass
        stalled.close()
        time.sleep(0.2)
        wire = waiting.encrypt(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        waiting.sock.sendall(wire[:3])
        time.sleep(0.1)
        waiting.sock.sendall(wire[3:])
        return answer_status(waiting.read_to_end())
    finally:
        waiting.sock.close()


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
                "traversal": cmd_traversal, "keys": cmd_keys, "slowloris": cmd_slowloris, "hello": cmd_hello,
                "idle": cmd_idle, "flood": cmd_flood, "tlserrors": cmd_tlserrors, "certs": cmd_certs}
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
