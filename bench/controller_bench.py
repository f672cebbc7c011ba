#!/usr/bin/env python3
"""Controller figures against a real kube-apiserver, two agents on loopback and the conduit-controller binary:

  1. apply -> first byte: a TransferJob that creates a 1 GiB target region (--timed-mib) is created in the
     apiserver; how long until the source agent starts moving bytes (its transfer's startedAt). Median and
     p90 of N jobs, one at a time.
  2. status lag: how long after the agent finished (finishedAt) the job's status says Succeeded in the
     apiserver, and how often status.bytesTransferred changes while a job runs.
  3. many small jobs created at once (default 1,000 x 64 KiB): wall time until every one is Succeeded, the
     controller's peak RSS (VmHWM), and the writes the apiserver served per job (its apiserver_request_total)
     with the CPU seconds it, etcd and the controller spent: on a small machine the apiserver's writes bound the rate.

Usage: bench/controller_bench.py [--build build] [--jobs 1000] [--samples 20]
Needs scripts/kube-tools.sh to have built the apiserver. Standard library only; prints figures, asserts none.
"""
import argparse
import base64
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from procfs import cpu_seconds, peak_rss_mib  # bench/, this script's own folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NS = "bench"
MiB = 1 << 20


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Api:
    """The apiserver, with the static token and CA scripts/kube-env.sh wrote into the kubeconfig."""

    def __init__(self, kubeconfig):
        text = open(kubeconfig).read()
        self.server = re.search(r"server: (\S+)", text).group(1)
        self.token = re.search(r"token: (\S+)", text).group(1)
        ca = base64.b64decode(re.search(r"certificate-authority-data: (\S+)", text).group(1)).decode()
        self.ctx = ssl.create_default_context(cadata=ca)

    def call(self, method, path, body=None, content_type="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as res:
            return json.loads(res.read() or b"{}")

    def writes(self):
        """Write requests the apiserver has served so far, by resource[/subresource] (its own counter)."""
        req = urllib.request.Request(self.server + "/metrics")
        req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, context=self.ctx, timeout=30) as res:
            text = res.read().decode()
        out = {}
        for m in re.finditer(r"^apiserver_request_total\{([^}]*)\} (\S+)$", text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if labels.get("verb") in ("POST", "PUT", "PATCH", "DELETE", "APPLY"):
                key = labels.get("resource", "") + ("/" + labels["subresource"] if labels.get("subresource") else "")
                out[key] = out.get(key, 0) + float(m.group(2))
        return out

    def open(self, path):
        """A streaming GET (a watch): the response, read line by line."""
        req = urllib.request.Request(self.server + path)
        req.add_header("Authorization", "Bearer " + self.token)
        return urllib.request.urlopen(req, context=self.ctx, timeout=600)

    def jobs_path(self, name=""):
        return f"/apis/conduit.dev/v1alpha1/namespaces/{NS}/transferjobs" + (f"/{name}" if name else "")


def make_tls(work):
    """--tls: a throwaway CA and one agent certificate naming "conduit-agent" (as the chart makes them)."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
        f"{work}/ca.key", "-out", f"{work}/ca.crt", "-days", "2", "-subj", "/CN=bench-ca")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{work}/agent.key",
        "-out", f"{work}/agent.csr", "-subj", "/CN=conduit-agent")
    with open(f"{work}/agent.ext", "w") as f:
        f.write("subjectAltName=DNS:conduit-agent\n")
    run("x509", "-req", "-in", f"{work}/agent.csr", "-CA", f"{work}/ca.crt", "-CAkey", f"{work}/ca.key",
        "-set_serial", "1", "-days", "1", "-extfile", f"{work}/agent.ext", "-out", f"{work}/agent.crt")
    return ["--tls-cert", f"{work}/agent.crt", "--tls-key", f"{work}/agent.key", "--peer-ca-file",
            f"{work}/ca.crt", "--peer-tls-server-name", "conduit-agent"]


def make_identities(work):
    """--identities: client certificates from make_tls's CA for the controller (conduit:controller) and the
    agents (conduit:agent), as the chart makes them (docs/security.md, "Identities"). The agents' flags."""
    for who, cn in (("controller", "conduit:controller"), ("agent-client", "conduit:agent")):
        subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", f"{work}/{who}.key", "-out", f"{work}/{who}.csr", "-subj", f"/CN={cn}"],
                       check=True, capture_output=True)
        with open(f"{work}/{who}.ext", "w") as f:
            f.write("extendedKeyUsage=clientAuth\n")
        subprocess.run(["openssl", "x509", "-req", "-in", f"{work}/{who}.csr", "-CA", f"{work}/ca.crt", "-CAkey",
                        f"{work}/ca.key", "-set_serial", "2" if who == "controller" else "3", "-days", "1",
                        "-extfile", f"{work}/{who}.ext", "-out", f"{work}/{who}.crt"],
                       check=True, capture_output=True)
    return ["--client-ca-file", f"{work}/ca.crt", "--peer-client-cert", f"{work}/agent-client.crt",
            "--peer-client-key", f"{work}/agent-client.key"]


class Agent:
    def __init__(self, work, name, bin_dir, token, log_level, tls_args=()):
        self.name = name
        os.makedirs(f"{work}/{name}", exist_ok=True)
        self.out = open(f"{work}/{name}.out", "w+")
        env = dict(os.environ, NODE_NAME=name)
        self.proc = subprocess.Popen(
            [f"{bin_dir}/conduit-agent", "--listen", "127.0.0.1:0", "--providers", "tcp", "--bind-address",
             "127.0.0.1", "--token-file", f"{work}/token", "--data-dir", f"{work}/{name}", "--memory-cap",
             "4GiB", "--import-socket", f"{work}/{name}.sock", "--log-level", log_level, *tls_args],
            stdout=self.out, stderr=open(f"{work}/{name}.log", "w"), env=env)
        self.token = token
        self.ctx = None
        if tls_args:
            self.ctx = ssl.create_default_context(cafile=f"{work}/ca.crt")
            self.ctx.check_hostname = False  # the certificate names the Service, not 127.0.0.1; the CA is checked
        for _ in range(100):
            self.out.seek(0)
            m = re.search(r"^listening (\S+)", self.out.read(), re.M)
            if m:
                self.url = ("https://" if tls_args else "http://") + m.group(1)
                return
            time.sleep(0.1)
        raise SystemExit(f"agent {name} did not start")

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30, context=self.ctx) as res:
            return json.loads(res.read() or b"{}")


def job(name, source_region, nbytes, extra=None):
    spec = {
        "source": {"node": "node-a", "region": source_region},
        "targets": [{"node": "node-b", "region": name, "create": {"bytes": nbytes, "memory": "host"}}],
        "strategy": "PointToPoint",
        "verify": "crc32c",
    }
    spec.update(extra or {})
    return {"apiVersion": "conduit.dev/v1alpha1", "kind": "TransferJob", "metadata": {"name": name}, "spec": spec}


def newest_transfer(agent, after):
    """The source agent's transfer created at or after `after` (epoch seconds)."""
    items = agent.call("GET", "/v1/transfers")["items"]
    items = [t for t in items if parse_time(t["createdAt"]) >= after - 0.002]
    return max(items, key=lambda t: t["createdAt"]) if items else None


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", type=int, default=1000, help="small jobs created at once")
    ap.add_argument("--samples", type=int, default=20, help="jobs timed one at a time")
    ap.add_argument("--timed-mib", type=int, default=1024,
                    help="the target region each timed job creates (MiB); moved in about 0.25 s")
    ap.add_argument("--tls", action="store_true",
                    help="agents serve HTTPS (one certificate naming conduit-agent); the controller checks it")
    ap.add_argument("--identities", action="store_true",
                    help="with --tls: the controller and the agents call with client certificates, not the token")
    ap.add_argument("--log-level", default="warn", help="the controller's and agents'")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs) and say where")
    args = ap.parse_args()
    bin_dir = os.path.join(os.path.abspath(args.build), "bin")

    work = tempfile.mkdtemp(prefix="conduit-controller-bench.")
    procs = []
    env_dir = f"{work}/env"
    try:
        out = subprocess.run([f"{ROOT}/scripts/kube-env.sh", "start", env_dir], check=True, capture_output=True,
                             text=True).stdout
        kubeconfig = re.search(r"KUBECONFIG=(\S+)", out).group(1)
        api = Api(kubeconfig)
        tools = subprocess.run([f"{ROOT}/scripts/kube-tools.sh", "--print"], capture_output=True, text=True).stdout
        kubectl = re.search(r"^KUBECTL=(\S+)", tools, re.M).group(1)
        subprocess.run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f", f"{ROOT}/crds/transferjobs.conduit.dev.yaml",
                        "-f", f"{ROOT}/crds/fabricnodes.conduit.dev.yaml"], check=True, capture_output=True)
        subprocess.run([kubectl, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established",
                        "crd/transferjobs.conduit.dev", "--timeout=30s"], check=True, capture_output=True)
        api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})

        token = "bench-" + os.urandom(8).hex()
        with open(f"{work}/token", "w") as f:
            f.write(token + "\n")
        tls_args = make_tls(work) if args.tls else []
        if args.identities:
            if not args.tls:
                ap.error("--identities needs --tls")
            tls_args += make_identities(work)
        a = Agent(work, "node-a", bin_dir, token, args.log_level, tls_args)
        b = Agent(work, "node-b", bin_dir, token, args.log_level, tls_args)
        procs += [a.proc, b.proc]
        a.call("POST", "/v1/regions", {"name": "src", "bytes": args.timed_mib * MiB, "memory": "host"})
        a.call("POST", "/v1/regions", {"name": "small", "bytes": 64 * 1024, "memory": "host"})

        controller = subprocess.Popen(
            [f"{bin_dir}/conduit-controller", "--kubeconfig", kubeconfig, "--namespace", NS, "--agents",
             f"node-a={a.url},node-b={b.url}", "--log-level", args.log_level,
             *(["--agent-client-cert", f"{work}/controller.crt", "--agent-client-key", f"{work}/controller.key"]
               if args.identities else ["--agent-token-file", f"{work}/token"]),
             *(["--agent-ca-file", f"{work}/ca.crt", "--agent-tls-server-name", "conduit-agent"] if args.tls else [])],
            stdout=open(f"{work}/controller.out", "w"), stderr=open(f"{work}/controller.log", "w"))
        procs.append(controller)
        time.sleep(1)

        # 1 + 2: one job at a time, each creating a --timed-mib target region (the 1 GiB by default),
        # paced to ~0.25 s of movement: long enough to watch progress. The region goes once timed.
        first_byte, lag, updates = [], [], []
        for i in range(args.samples):
            name = f"timed-{i}"
            t0 = time.time()
            api.call("POST", api.jobs_path(),
                     job(name, "src", args.timed_mib * MiB, {"maxBytesPerSecond": args.timed_mib * 4 * MiB}))
            seen_bytes, changes, t_done = None, [], None
            deadline = t0 + 60
            while time.time() < deadline:
                status = api.call("GET", api.jobs_path(name)).get("status", {})
                now = time.time()
                if status.get("bytesTransferred") != seen_bytes:
                    seen_bytes = status.get("bytesTransferred")
                    changes.append(now)
                if status.get("phase") == "Succeeded":
                    t_done = now
                    break
                if status.get("phase") == "Failed":
                    raise SystemExit(f"{name} failed: {status}")
                time.sleep(0.005)
            if t_done is None:
                raise SystemExit(f"{name} not Succeeded in 60 s")
            t = newest_transfer(a, t0)
            if t is None or not t.get("startedAt") or not t.get("finishedAt"):
                raise SystemExit(f"no agent transfer found for {name}: {t}")
            first_byte.append(parse_time(t["startedAt"]) - t0)
            lag.append(t_done - parse_time(t["finishedAt"]))
            if len(changes) > 2:
                updates += [y - x for x, y in zip(changes[1:], changes[2:])]
            b.call("DELETE", "/v1/regions/" + name)
        print(f"apply -> first byte ({args.samples} jobs, one at a time): median "
              f"{statistics.median(first_byte) * 1000:.0f} ms, p90 {pct(first_byte, 90) * 1000:.0f} ms, "
              f"max {max(first_byte) * 1000:.0f} ms")
        print(f"status lag (agent finishedAt -> Succeeded visible in the apiserver): median "
              f"{statistics.median(lag) * 1000:.0f} ms, p90 {pct(lag, 90) * 1000:.0f} ms, max "
              f"{max(lag) * 1000:.0f} ms")
        if updates:
            print(f"status.bytesTransferred while running: changes every {statistics.median(updates) * 1000:.0f} ms "
                  f"(median of {len(updates)} intervals)")

        # 3: many small jobs at once.
        for p in (a, b):
            for t in p.call("GET", "/v1/regions")["items"]:
                if t["name"].startswith("timed-"):
                    p.call("DELETE", "/v1/regions/" + t["name"])
        # Watched, as `kubectl wait` would: listing 1,000 jobs every fraction of a second cost the apiserver
        # more CPU than the controller's own writes (and made the figure depend on the poll interval).
        listing = api.call("GET", api.jobs_path())
        watch = api.open(api.jobs_path() + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion="
                         + listing["metadata"]["resourceVersion"])
        succeeded, failed = set(), []

        def follow():  # in a thread of its own, so the watch is read while the jobs are created
            for line in watch:
                event = json.loads(line)
                obj = event.get("object", {})
                name = obj.get("metadata", {}).get("name", "")
                if event.get("type") not in ("ADDED", "MODIFIED") or not name.startswith("small-"):
                    continue
                phase = obj.get("status", {}).get("phase")
                if phase == "Failed":
                    failed.append(f"{name}: {obj.get('status')}")
                    return
                if phase == "Succeeded":
                    succeeded.add(name)
                    if len(succeeded) == args.jobs:
                        return

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        writes0 = api.writes()
        pids = {"apiserver": int(open(f"{env_dir}/kube-apiserver.pid").read()),
                "etcd": int(open(f"{env_dir}/etcd.pid").read()), "controller": controller.pid}
        cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: api.call("POST", api.jobs_path(), job(f"small-{i}", "small", 64 * 1024)),
                          range(args.jobs)))
        created = time.time() - t0
        follower.join(600)
        watch.close()
        if failed:
            raise SystemExit(f"a small job Failed: {failed[0]}")
        done = len(succeeded)
        wall = time.time() - t0
        peak = peak_rss_mib(controller.pid)
        cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
        writes1 = api.writes()
        per_job = {k: (writes1[k] - writes0.get(k, 0)) / args.jobs for k in writes1
                   if writes1[k] - writes0.get(k, 0) > 0}
        print(f"{args.jobs} x 64 KiB jobs created at once (in {created:.1f} s): {done} Succeeded after "
              f"{wall:.1f} s ({done / wall:.1f} jobs/s); controller peak RSS {peak:.1f} MiB")
        print(f"apiserver writes per job: {sum(per_job.values()):.2f} ("
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(per_job.items())) + "); CPU seconds: "
              + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
        return 0 if done == args.jobs else 1
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([f"{ROOT}/scripts/kube-env.sh", "stop", env_dir], capture_output=True)
        if args.keep:
            print(f"logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
