"""Load (formerly bench/load_test.sh): 200 concurrent small transfers through one agent pair (tcp on loopback),
batch after batch for a bounded time. Each transfer has its own source region (loaded from its own random
file on agent a), its own fresh target region and grant on agent b, and runs with verify: crc32c; the batch's
200 transfers are started together. A transfer passes when the source agent says Succeeded and verified, both
agents give the same checksum, and the target region saved back to a file equals the source file byte for
byte; then its grant and both regions are removed, so every batch allocates and frees everything again.

Measured: VmRSS, threads and open fds of both agents from /proc, before the first batch, after the first
(warm-up: allocator arenas, thread stacks, the HTTP pool) and after the last. Asserted, besides every
transfer: agent b (which keeps nothing between batches) grows by at most 16 MiB after warm-up, and agent a
(which keeps every finished transfer's status for 10 minutes by design) by at most 8 KiB per transfer run
after warm-up: a kept status is well under that, while a leaked source registration or region would cost the
transfer's own size (256 KiB) each. Open fds must not grow with the batches (a leaked socket or endpoint per
transfer would add 200 per batch).

env: LOAD_SECONDS (60), LOAD_CONCURRENCY (200), LOAD_BYTES (262144, per transfer).
"""

import http.client
import json
import os
import re
import threading
import time
import urllib.parse

import pytest

SECONDS = float(os.environ.get("LOAD_SECONDS", "60"))
N = int(os.environ.get("LOAD_CONCURRENCY", "200"))
SIZE = int(os.environ.get("LOAD_BYTES", "262144"))


class Api:
    """One agent's REST API on a fresh connection per call (as 200 independent clients would)."""

    def __init__(self, url, token):
        self.url = url
        self.token = token

    def call(self, method, path, body=None, expect=None):
        u = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        headers = {"Authorization": "Bearer " + self.token, "Connection": "close"}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        res = conn.getresponse()
        text = res.read()
        conn.close()
        answer = json.loads(text) if text else None
        if expect is not None and res.status != expect:
            raise RuntimeError(f"{method} {self.url}{path}: HTTP {res.status} (wanted {expect}): {text[:300]!r}")
        return res.status, answer


def proc(pid):
    status = open(f"/proc/{pid}/status").read()
    rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    return {"rss": rss, "threads": threads, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def mib(x):
    return f"{x / 1048576:.1f} MiB"


# However long LOAD_SECONDS asks for, plus the last batch and the setup.
@pytest.mark.timeout(SECONDS + 300)
def test_concurrent_verified_transfers_memory_stable(agents):
    agent_a = agents.start("a", "--memory-cap", "2GiB", "--log-level", "warn")
    agent_b = agents.start("b", "--memory-cap", "2GiB", "--log-level", "warn")
    a, b = Api(agent_a.url, agents.token), Api(agent_b.url, agents.token)
    # The harness starts the binary itself: these are the agents' own pids.
    a_pid, b_pid = agent_a.process.pid, agent_b.process.pid

    def sample():
        return {"a": proc(a_pid), "b": proc(b_pid)}

    sources = []
    for i in range(N):
        data = os.urandom(SIZE)
        (agent_a.data_dir / f"src-{i}.bin").write_bytes(data)
        sources.append(data)

    def one(i, barrier, results):
        src, dst = f"src-{i}", f"dst-{i}"
        try:
            a.call("POST", "/v1/regions", {"name": src, "file": f"{src}.bin"}, 201)
            b.call("POST", "/v1/regions", {"name": dst, "bytes": SIZE}, 201)
            _, grant = b.call("POST", f"/v1/regions/{dst}/grants", {"access": "write", "ttlSeconds": 300}, 201)
            barrier.wait(timeout=300)
            started = time.monotonic()
            _, t = a.call("POST", "/v1/transfers",
                          {"source": {"region": src},
                           "targets": [{"grant": grant["key"], "url": b.url, "region": dst}],
                           "verify": "crc32c"}, 202)
            while t["state"] in ("Queued", "Running"):
                time.sleep(0.02)
                _, t = a.call("GET", f"/v1/transfers/{t['id']}", expect=200)
            took = time.monotonic() - started
            if t["state"] != "Succeeded" or not t["verified"]:
                raise RuntimeError(f"transfer {t['id']}: {t['state']} verified={t['verified']} "
                                   f"{t.get('reason')}: {t.get('message')}")
            _, sa = a.call("GET", f"/v1/regions/{src}/checksum?slice={SIZE}", expect=200)
            _, sb = b.call("GET", f"/v1/regions/{dst}/checksum?slice={SIZE}", expect=200)
            if sa["crc32c"] != sb["crc32c"]:
                raise RuntimeError(f"{dst}: checksum {sb['crc32c']} != source {sa['crc32c']}")
            b.call("POST", f"/v1/regions/{dst}/save", {"file": f"out-{i}.bin"}, 200)
            out = agent_b.data_dir / f"out-{i}.bin"
            if out.read_bytes() != sources[i]:
                raise RuntimeError(f"{dst}: saved bytes differ from src-{i}.bin")
            out.unlink()
            b.call("DELETE", f"/v1/grants/{grant['id']}", expect=204)
            b.call("DELETE", f"/v1/regions/{dst}", expect=204)
            # The source agent lets go of its region when the transfer's thread ends, a moment after it reports.
            for _ in range(100):
                status, _ = a.call("DELETE", f"/v1/regions/{src}")
                if status != 409:
                    break
                time.sleep(0.02)
            if status != 204:
                raise RuntimeError(f"DELETE {src} on a: HTTP {status}")
            results[i] = ("ok", took)
        except threading.BrokenBarrierError:
            results[i] = ("aborted", f"{src}->{dst}: not started: another transfer of the batch failed first")
        except Exception as e:  # noqa: BLE001 - every failure is reported with its transfer
            barrier.abort()
            results[i] = ("fail", f"{src}->{dst}: {e}")

    def batch():
        barrier = threading.Barrier(N)
        results = [None] * N
        threads = [threading.Thread(target=one, args=(i, barrier, results)) for i in range(N)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Real failures first: the transfers a failure aborted only say so.
        failed = [r[1] for r in results if r is not None and r[0] == "fail"]
        failed += [r[1] for r in results if r is None or r[0] == "aborted"]
        return time.monotonic() - t0, failed, [r[1] for r in results if r and r[0] == "ok"]

    cold = sample()
    t_start = time.monotonic()
    batches, transfers, failures = [], 0, []
    warm = None
    while not batches or time.monotonic() - t_start < SECONDS:
        took, failed, times = batch()
        transfers += N - len(failed)
        failures += failed
        after = sample()
        batches.append({"seconds": took, "after": after, "p50": sorted(times)[len(times) // 2] if times else 0})
        if warm is None:
            warm = after
        print(f"batch {len(batches):3d}: {N} transfers in {took:5.2f} s (median {batches[-1]['p50'] * 1000:4.0f} ms"
              f" from start to verified), {len(failed)} failed;"
              f" a: {mib(after['a']['rss'])} {after['a']['threads']} threads {after['a']['fds']} fds;"
              f" b: {mib(after['b']['rss'])} {after['b']['threads']} threads {after['b']['fds']} fds", flush=True)
        if failed:
            break

    end = batches[-1]["after"]
    elapsed = time.monotonic() - t_start
    after_warm = transfers - N
    print(f"\n{transfers} transfers of {SIZE} bytes in {len(batches)} batches of {N} concurrent, {elapsed:.1f} s"
          f" ({transfers / elapsed:.0f} transfers/s), {len(failures)} failed")
    for side in ("a", "b"):
        print(f"agent {side}: VmRSS start {mib(cold[side]['rss'])}, after warm-up {mib(warm[side]['rss'])},"
              f" end {mib(end[side]['rss'])} (max {mib(max(x['after'][side]['rss'] for x in batches))});"
              f" threads {cold[side]['threads']} -> {end[side]['threads']}; fds {cold[side]['fds']} -> "
              f"{end[side]['fds']}")
    assert not failures, f"{len(failures)} transfers failed, first: {failures[0]}"
    print("every transfer Succeeded, verified by the source agent, equal checksums on both agents and"
          " byte-identical when saved back")
    _, history = a.call("GET", "/v1/transfers", expect=200)
    print(f"agent a keeps {len(history['items'])} finished transfers for GET /v1/transfers (10 minutes, by design)")
    if len(batches) < 2:
        print("one batch only: no growth to judge (raise LOAD_SECONDS)")
        return
    per_transfer = (end["a"]["rss"] - warm["a"]["rss"]) / max(after_warm, 1)
    growth_b = end["b"]["rss"] - warm["b"]["rss"]
    print(f"after warm-up: agent a {per_transfer / 1024:+.2f} KiB per transfer over {after_warm} transfers"
          f" (bound 8 KiB: its transfer history); agent b {mib(growth_b)} (bound 16 MiB)")
    grew = {s: (warm[s]["fds"], end[s]["fds"]) for s in ("a", "b") if end[s]["fds"] > warm[s]["fds"] + 16}
    problems = []
    if per_transfer > 8 * 1024 or growth_b > 16 * 1048576:
        problems.append(f"agent memory grew beyond the bound: a {per_transfer / 1024:+.2f} KiB per transfer "
                        f"(bound 8 KiB), b {mib(growth_b)} (bound 16 MiB)")
    if grew:
        problems.append(f"open fds grew with the batches: {grew} (after warm-up, end)")
    assert not problems, "; ".join(problems)
