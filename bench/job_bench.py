#!/usr/bin/env python3
"""TransferJobs against the stages they are made of, measured in one run on this machine (docs/pipelines.md).

Stages alone, each the way a job uses it:
  read    the source file read in 16 MiB pieces (page cache warm, as a job after the file was written; with
          --cold, dropped from the page cache first and read with O_DIRECT, as the agent reads such a file,
          and also through the page cache for comparison: "read-cached", not a stage any job needs)
  write   a file written in 16 MiB pieces from aligned memory with O_DIRECT, then fsync (what a file target
          does; with --save-page-cache, through the page cache, as agents started with that flag write)
  wire    conduit-bench --self over tcp at the job's chunk and window, into prefaulted memory
Jobs (local mode: two conduit-agents on loopback, conduit-controller --once-job), each verify none and crc32c:
  region -> region, file -> region, file -> region + save, file -> file
Each job's wall time is its status.startTime -> completionTime (what the user waits for after apply), its
end-to-end GB/s, the slowest stage alone and the ratio job / slowest stage (the target: at most 1.3 without
verify, 1.5 with crc32c). A file -> file job of --big bytes reports both agents' peak RSS (VmHWM) against the
pipeline bound. Interleaved rounds; medians with [min, max].

CPU: the CPU seconds both agents spent on each job (utime + stime from /proc), and the wire stage's own (the
two ends' CPU as conduit-bench reports it). On a machine whose CPUs the wire alone keeps busy, a job cannot
take less than its agents' CPU seconds / CPUs: that floor is printed with each job, with the ratio to it.

Usage: bench/job_bench.py [--build build] [--size 1GiB] [--big 4GiB] [--rounds 3] [--shapes file->region,...]
                          [--cold] [--save-page-cache]
Standard library only; prints figures, asserts none.
"""
import argparse
import ctypes
import datetime
import json
import mmap
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from procfs import cpu_seconds, peak_rss_mib  # bench/, this script's own folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
PIECE = 16 * MiB


def size_arg(text):
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text}: a size such as 512MiB or 1GiB")
    return int(m.group(1)) * {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def median_range(values):
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def random_file(path, size):
    """SIZE bytes of AES-CTR keystream: random enough, ~1 GB/s."""
    with open("/dev/zero", "rb") as zeros, open(path, "wb") as out:
        p = subprocess.Popen(["openssl", "enc", "-aes-128-ctr", "-nosalt", "-pass", "pass:bench", "-pbkdf2",
                              "-iter", "1"], stdin=zeros, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        left = size
        while left > 0:
            chunk = p.stdout.read(min(left, PIECE))
            out.write(chunk)
            left -= len(chunk)
        p.kill()
        p.wait()


SHAPES = ("region->region", "file->region", "file->region+save", "file->file")


def drop_from_page_cache(path):
    """PATH written back and dropped from the page cache, as a file nobody has read lately."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def slot():
    """PIECE bytes of memory as the agent's read-ahead slots are: 2 MiB-aligned, transparent huge pages."""
    huge = 2 * MiB
    mem = mmap.mmap(-1, PIECE + huge)
    mem.madvise(mmap.MADV_HUGEPAGE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    skip = -address % huge
    return mem, memoryview(mem)[skip:skip + PIECE]


def stage_read(path, direct=False):
    mem, buf = slot()
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        offset = 0
        while (n := os.preadv(fd, [buf], offset)) > 0:
            offset += n
    finally:
        os.close(fd)
    took = time.perf_counter() - start
    buf.release()
    mem.close()
    return took


def stage_write(path, size, direct=True):
    mem, buf = slot()
    buf[:] = os.urandom(PIECE)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    # As the agent writes: whole 4 KiB blocks around the page cache, a last partial block through it.
    whole = size // 4096 * 4096 if direct else 0
    dfd = os.open(path, os.O_WRONLY | os.O_DIRECT) if direct else fd
    try:
        offset = 0
        while offset < size:
            into = dfd if offset < whole else fd
            offset += os.pwritev(into, [buf[: min((whole if offset < whole else size) - offset, PIECE)]], offset)
        os.fsync(fd)
    finally:
        if dfd != fd:
            os.close(dfd)
        os.close(fd)
    took = time.perf_counter() - start
    os.unlink(path)
    buf.release()
    mem.close()
    return took


def stage_wire(build, size, chunk, window):
    out = subprocess.run([os.path.join(build, "bin", "conduit-bench"), "--self", "--provider", "tcp", "--size",
                          str(size), "--chunk", str(chunk), "--window", str(window), "--iterations", "3",
                          "--json"], capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = (figures["initiator_cpu_s_per_gb"] + figures["target_cpu_s_per_gb"]) * size / 1e9
    return size / (figures["gbps_median"] * 1e9), cpu


class Agents:
    def __init__(self, build, work, pipeline, region_pool="2GiB", extra=()):
        self.build, self.work = build, work
        self.token = os.path.join(work, "token")
        with open(self.token, "w") as f:
            f.write(os.urandom(32).hex())
        self.procs, self.urls = {}, {}
        for node in ("node-a", "node-b"):
            data = os.path.join(work, node)
            os.makedirs(data)
            out = open(os.path.join(work, node + ".out"), "w")
            p = subprocess.Popen([os.path.join(build, "bin", "conduit-agent"), "--listen", "127.0.0.1:0",
                                  "--providers", "tcp", "--bind-address", "127.0.0.1", "--token-file", self.token,
                                  "--data-dir", data, "--memory-cap", "12GiB", "--pipeline-bytes", pipeline,
                                  "--region-pool", region_pool,
                                  "--log-level", "warn", "--import-socket", os.path.join(work, node + ".sock"),
                                  *extra],
                                 stdout=out, stderr=open(os.path.join(work, node + ".log"), "w"),
                                 env=dict(os.environ, NODE_NAME=node))
            self.procs[node] = p
            for _ in range(100):
                text = open(os.path.join(work, node + ".out")).read()
                m = re.search(r"^listening (\S+)", text, re.M)
                if m:
                    self.urls[node] = "http://" + m.group(1)
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"agent {node} did not start")

    def peak_rss_mib(self, node):
        return peak_rss_mib(self.procs[node].pid)

    def cpu_seconds(self):
        return sum(cpu_seconds(p.pid) for p in self.procs.values())

    def call(self, node, method, path, body=None):
        args = ["curl", "-s", "-X", method, "-H", "Authorization: Bearer " + open(self.token).read()]
        if body is not None:
            args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        return subprocess.run(args + [self.urls[node] + path], capture_output=True, text=True).stdout

    def stop(self):
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            p.wait(timeout=30)


def run_job(build, work, agents, name, source, target, verify, chunk, window):
    jobs = os.path.join(work, "jobs")
    os.makedirs(jobs, exist_ok=True)
    spec = {"source": {"node": "node-a", **source}, "targets": [{"node": "node-b", **target}],
            "transport": {"type": "tcp"}, "verify": verify, "chunkBytes": chunk, "window": window,
            "backoffLimit": 0}
    path = os.path.join(jobs, name + ".yaml")
    with open(path, "w") as f:
        json.dump({"apiVersion": "conduit.dev/v1alpha1", "kind": "TransferJob", "metadata": {"name": name},
                   "spec": spec}, f)
    flag = ",".join(f"{n}={u}" for n, u in agents.urls.items())
    r = subprocess.run([os.path.join(build, "bin", "conduit-controller"), "--local-dir", jobs, "--agents", flag,
                        "--agent-token-file", agents.token, "--once-job", name, "--log-level", os.environ.get("CTL_LOG", "warn")],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"job {name} failed: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    # The controller writes status back into the job's file as YAML; the three scalars needed are read
    # with a pattern (standard library only).
    text = open(path).read()
    status = {}
    for key in ("startTime", "completionTime", "slowestStage"):
        m = re.search(rf"^  {key}: \"?([^\"\n]+)\"?$", text, re.M)
        if m:
            status[key] = m.group(1)
    os.unlink(path)
    return parse_time(status["completionTime"]) - parse_time(status["startTime"]), status


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size", type=size_arg, default=1 << 30)
    ap.add_argument("--big", type=size_arg, default=4 << 30, help="file -> file size for the memory check (0: skip)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk", type=size_arg, default=MiB)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--pipeline", default="64MiB")
    ap.add_argument("--region-pool", default="2GiB",
                    help="the agents' --region-pool: memory of deleted regions kept for new ones (0: none)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="the jobs to run, comma-separated")
    ap.add_argument("--save-page-cache", action="store_true",
                    help="agents save through the page cache (their --save-page-cache), the write stage too")
    ap.add_argument("--cold", action="store_true",
                    help="drop the source file from the page cache before each read stage and file-source job")
    args = ap.parse_args()
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        sys.exit(f"--shapes: no such job {', '.join(sorted(unknown))} (have {', '.join(SHAPES)})")
    work = tempfile.mkdtemp(prefix="conduit-job-bench.")
    agents = None
    extra = ["--save-page-cache"] if args.save_page_cache else []
    try:
        agents = Agents(args.build, work, args.pipeline, args.region_pool, extra)
        src = os.path.join(work, "node-a", "src.bin")
        random_file(src, args.size)
        agents.call("node-a", "POST", "/v1/regions", {"name": "src", "file": "src.bin", "mode": "load"})
        shapes = {
            "region->region": ({"region": "src"}, lambda n: {"region": n, "create": {"bytes": args.size}}),
            "file->region": ({"file": "src.bin"}, lambda n: {"region": n, "create": {"bytes": args.size}}),
            "file->region+save": ({"file": "src.bin"},
                                  lambda n: {"region": n, "create": {"bytes": args.size}, "file": n + ".bin"}),
            "file->file": ({"file": "src.bin"}, lambda n: {"file": n + ".bin"}),
        }
        stages = {"read": [], "write": [], "wire": []}
        if args.cold:
            stages["read-cached"] = []
        jobs = {(shape, verify): [] for shape in args.shapes.split(",") for verify in ("none", "crc32c")}
        cpu = {key: [] for key in list(jobs) + ["wire"]}
        for rnd in range(args.rounds):
            if args.cold:
                drop_from_page_cache(src)
                stages["read-cached"].append(stage_read(src))
                drop_from_page_cache(src)
            stages["read"].append(stage_read(src, direct=args.cold))
            stages["write"].append(stage_write(os.path.join(work, "node-b", "stage.bin"), args.size,
                                              direct=not args.save_page_cache))
            wire, wire_cpu = stage_wire(args.build, args.size, args.chunk, args.window)
            stages["wire"].append(wire)
            cpu["wire"].append(wire_cpu)
            for (shape, verify), times in jobs.items():
                source, target = shapes[shape]
                name = f"j{rnd}-{shape.replace('->', '-').replace('+', '-')}-{verify}"
                if args.cold and "file" in source:
                    drop_from_page_cache(src)
                before = agents.cpu_seconds()
                took, _ = run_job(args.build, work, agents, name, source, target(name), verify, args.chunk,
                                  args.window)
                times.append(took)
                cpu[(shape, verify)].append(agents.cpu_seconds() - before)
                agents.call("node-b", "DELETE", f"/v1/regions/{name}")
                for leftover in (os.path.join(work, "node-b", name + ".bin"),):
                    if os.path.exists(leftover):
                        os.unlink(leftover)
        gb = args.size / 1e9
        print(f"conduit job bench: {args.size} bytes, chunk {args.chunk}, window {args.window}, tcp loopback, "
              f"{args.rounds} interleaved rounds, {os.cpu_count()} CPUs, region pool {args.region_pool}"
              f"{', source file cold' if args.cold else ''}"
              f"{', saves through the page cache' if args.save_page_cache else ''}; "
              "seconds as median [min, max]")
        for name, values in stages.items():
            print(f"  stage {name:<6} {median_range(values)} s  {gb / statistics.median(values):.2f} GB/s"
                  + (f"  CPU {median_range(cpu['wire'])} s" if name == "wire" else ""))
        needs = {"region->region": ["wire"], "file->region": ["read", "wire"],
                 "file->region+save": ["read", "wire", "write"], "file->file": ["read", "wire", "write"]}
        for (shape, verify), values in jobs.items():
            slowest = max(needs[shape], key=lambda s: statistics.median(stages[s]))
            alone = statistics.median(stages[slowest])
            job = statistics.median(values)
            floor = statistics.median(cpu[(shape, verify)]) / os.cpu_count()
            print(f"  job {shape:<18} verify {verify:<6} {median_range(values)} s  {gb / job:.2f} GB/s  "
                  f"slowest stage {slowest} {alone:.3f} s  ratio {job / alone:.2f}  "
                  f"agents' CPU {median_range(cpu[(shape, verify)])} s, floor {floor:.3f} s, ratio {job / floor:.2f}")
        if args.big > 0:
            for node in ("node-a", "node-b"):
                agents.procs[node].send_signal(signal.SIGTERM)
                agents.procs[node].wait(timeout=30)
            shutil.rmtree(work)
            os.makedirs(work)
            agents = Agents(args.build, work, args.pipeline, args.region_pool, extra)
            big = os.path.join(work, "node-a", "big.bin")
            random_file(big, args.big)
            write_alone = stage_write(os.path.join(work, "node-b", "stage.bin"), args.big,
                                      direct=not args.save_page_cache)
            rss0 = {n: agents.peak_rss_mib(n) for n in agents.procs}
            took, status = run_job(args.build, work, agents, "big", {"file": "big.bin"}, {"file": "big-copy.bin"},
                                   "crc32c", args.chunk, args.window)
            same = subprocess.run(["cmp", big, os.path.join(work, "node-b", "big-copy.bin")]).returncode == 0
            rss = {n: agents.peak_rss_mib(n) for n in agents.procs}
            print(f"  file->file {args.big} bytes crc32c: {took:.2f} s, {args.big / 1e9 / took:.2f} GB/s, "
                  f"slowest {status.get('slowestStage')}, cmp {'equal' if same else 'DIFFERENT'}; peak RSS "
                  + ", ".join(f"{n} {rss[n]:.0f} MiB (at start {rss0[n]:.0f})" for n in rss)
                  + f"; pipeline bound {args.pipeline} per side; write stage alone {write_alone:.2f} s, ratio "
                  f"{took / write_alone:.2f}")
    finally:
        if agents:
            try:
                agents.stop()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
