"""Per-node agent certificates through the Kubernetes CSR API (docs/security.md, "Per-node certificates").

A real kube-apiserver; Node and Pod objects for node-a and node-b (no kubelet runs: the pods are what the
apiserver binds tokens to); two agents serving HTTPS, each with ``--node-certificate`` and a kubeconfig holding a
token bound to its node's pod, as the kubelet would mount it; the real controller in Kubernetes mode as the
signer (``--agent-signer-cert``). Then:

1. Each agent asks for its certificate (a CertificateSigningRequest to conduit.dev/agent), answers /readyz 503
   until the controller signed it, and then 200; the CSR is Approved and its certificate names
   conduit:agent:<node>, signed by the signer's CA alone.
2. node-a's agent writes into a node-b region over a grant made for node-a, verified crc32c: node-b believes
   node-a's certificate for that grant (landed bytes, checksums); the same transfer over a grant made for node-c
   fails, node-b's answer naming node-a.
3. An agent claiming node-a with node-b's pod token is denied, the CSR's Denied condition and its /readyz both
   saying the pod runs on node-b; its certificate file never appears.
4. A restarted agent keeps its certificate (no new CSR).
"""

import base64
import json
import subprocess
import time

import requests

from e2e.util import free_port, ok
from harness import MiB, random_file, wait_for
from harness.tls import CA

NAMESPACE = "conduit-identity"
SA = "conduit-agent"
SERVER_NAME = "conduit-agent"


def test_each_agent_gets_its_nodes_certificate_from_the_controller_and_is_believed_for_that_node_alone(
        kube, agents, build, work, processes, report):
    k = kube(NAMESPACE)

    def kubectl_ok(*args, input=None):
        r = k.kubectl(*args, input=input)
        assert r.returncode == 0, f"kubectl {' '.join(map(str, args[:3]))}: {r.stderr.strip()}"
        return r.stdout

    # ---- the cluster side: the agents' ServiceAccount, its one permission, a pod of it on each node
    objects = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": NAMESPACE}},
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "conduit-identity-agent"},
                "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
                           "verbs": ["create", "get"]}]},
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "conduit-identity-agent"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "conduit-identity-agent"},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NAMESPACE}]}]
    for node in ("node-a", "node-b"):
        objects += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}},
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"agent-{node}", "namespace": NAMESPACE},
                     "spec": {"nodeName": node, "serviceAccountName": SA,
                              "containers": [{"name": "agent", "image": "conduit-agent"}]}}]
    kubectl_ok("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))

    def kubeconfig_for(pod):
        """A kubeconfig with a token bound to POD, as the kubelet mounts one into it."""
        token = kubectl_ok("create", "token", SA, "-n", NAMESPACE, "--bound-object-kind", "Pod",
                           "--bound-object-name", pod, "--duration", "1h").strip()
        path = work / f"{pod}.kubeconfig"
        path.write_text(kubectl_ok("config", "view", "--raw", "--minify"))
        r = subprocess.run([k.tools["KUBECTL"], "--kubeconfig", path, "config", "set-credentials", "conduit-admin",
                            f"--token={token}"], capture_output=True, text=True)
        assert r.returncode == 0, f"kubeconfig for {pod}: {r.stderr.strip()}"
        return path

    # ---- TLS: the install's CA (agents' server certificate, the controller's client certificate), and the
    # agent signer's own CA, whose key only the controller gets
    ca, signer = CA(work / "ca"), CA(work / "signer", "conduit-agent-signer")
    server = ca.issue(SERVER_NAME, ips=["127.0.0.1"])
    controller_cert = ca.issue("conduit:controller", client=True)

    port = free_port()
    controller = processes.start(
        [build.controller, "--kubeconfig", k.kubeconfig, "--namespace", NAMESPACE, "--agent-service", "conduit-agent",
         "--agent-service-namespace", NAMESPACE, "--leader-elect", "--leader-election-namespace", NAMESPACE,
         "--agent-ca-file", ca.cert, "--agent-tls-server-name", SERVER_NAME,
         "--agent-client-cert", controller_cert.cert, "--agent-client-key", controller_cert.key,
         "--agent-signer-cert", signer.cert, "--agent-signer-key", signer.key,
         "--agent-service-account", f"{NAMESPACE}/{SA}", "--metrics-listen", f"127.0.0.1:{port}"],
        name="controller", stdout=work / "controller.out", stderr=work / "controller.log")

    agents.ca = ca.cert
    agents.verify = str(ca.cert)

    def agent_args(node, pod):
        return ["--tls-cert", server.cert, "--tls-key", server.key, "--client-ca-file", ca.cert,
                "--agent-client-ca-file", signer.cert, "--peer-ca-file", ca.cert,
                "--peer-tls-server-name", SERVER_NAME, "--node-name", node,
                "--node-certificate", work / f"{node}.pem", "--kubeconfig", kubeconfig_for(pod),
                "--memory-cap", "1GiB"]

    def csrs():
        return json.loads(kubectl_ok("get", "csr", "-o", "json"))["items"]

    # ---- 1. each agent: not ready until its certificate is signed, then ready with the node's name in it
    t0 = time.monotonic()
    for node in ("node-a", "node-b"):
        agents.start(node, *map(str, agent_args(node, f"agent-{node}")))
    took = time.monotonic() - t0
    assert controller.running(), f"controller exited: {(work / 'controller.log').read_text()[-400:]}"
    issued = {}
    for item in csrs():
        node = item["metadata"].get("labels", {}).get("conduit.dev/node")
        conditions = {c["type"]: c for c in item.get("status", {}).get("conditions", [])}
        assert item["spec"]["signerName"] == "conduit.dev/agent", item["spec"]
        assert item["spec"]["username"] == f"system:serviceaccount:{NAMESPACE}:{SA}", item["spec"]["username"]
        assert "Approved" in conditions and item["status"].get("certificate"), f"CSR of {node}: {item.get('status')}"
        issued[node] = base64.b64decode(item["status"]["certificate"])
    assert sorted(issued) == ["node-a", "node-b"], f"CSRs: {sorted(issued)}"
    for node, pem in issued.items():
        path = work / f"{node}-issued.crt"
        path.write_bytes(pem)
        text = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-subject", "-ext", "extendedKeyUsage"],
                              capture_output=True, text=True).stdout
        assert f"CN = conduit:agent:{node}" in text and "TLS Web Client Authentication" in text, text
        by_signer = subprocess.run(["openssl", "verify", "-CAfile", signer.cert, path], capture_output=True, text=True)
        assert by_signer.returncode == 0, f"{node}'s certificate is not the signer's: {by_signer.stdout}"
        by_ca = subprocess.run(["openssl", "verify", "-CAfile", ca.cert, path], capture_output=True, text=True)
        assert by_ca.returncode != 0, f"{node}'s certificate verifies against the install's CA"
        assert (work / f"{node}.pem").stat().st_mode & 0o077 == 0, f"{node}.pem is readable by others"
    ok(f"both agents ready with certificates from the controller's signer in {took:.1f} s: CSRs Approved, "
       f"CN conduit:agent:<node>, client auth, signed by the signer's CA and not the install's")

    # ---- 2. a transfer between them: believed for node-a's grant, refused for another node's
    a, b = agents["node-a"], agents["node-b"]
    source = random_file(work / "node-a" / "weights.bin", 16)
    assert a.post("/v1/regions", {"name": "weights", "file": "weights.bin", "mode": "load"}).get("name") == "weights"

    def transfer(name, peer):
        assert b.post("/v1/regions", {"name": name, "bytes": 16 * MiB}).get("name") == name
        grant = b.post(f"/v1/regions/{name}/grants", {"access": "write", "ttlSeconds": 300, "peer": peer})
        started = a.post("/v1/transfers", {"source": {"region": "weights"}, "verify": "crc32c",
                                          "targets": [{"grant": grant.get("key"), "url": b.url, "region": name}]})
        assert "id" in started, f"POST /v1/transfers: {started}"
        wait_for(lambda: a.transfer(started["id"]).get("state") in ("Succeeded", "Failed"), 60,
                 f"transfer {name}", interval=0.1, detail=lambda: a.transfer(started["id"]))
        return a.transfer(started["id"])

    good = transfer("for-a", "node-a")
    assert good.get("state") == "Succeeded", f"over node-a's grant: {good}"
    b.save_and_compare("for-a", source)
    bad = transfer("for-c", "node-c")
    assert bad.get("state") == "Failed", f"over node-c's grant: {bad}"
    assert bad.get("reason") == "RemoteAccessDenied", f"over node-c's grant: reason {bad.get('reason')}: {bad}"
    assert 'the agent of node "node-a" may not' in bad.get("message", ""), f"the refusal does not name node-a: {bad}"
    ok("node-a -> node-b over node-a's grant: Succeeded, crc32c, byte-identical; over node-c's grant: Failed, "
       f"RemoteAccessDenied, node-b naming node-a ({bad.get('message', '')[:100]})")

    # ---- 3. a pod on node-b claiming node-a: denied, and the agent says why
    # A third agent, outside the pool (which waits for /readyz 200).
    liar_port = free_port()
    args = agent_args("node-a", "agent-node-b")
    args[args.index("--node-certificate") + 1] = work / "liar.pem"
    (work / "liar").mkdir()
    liar = processes.start(
        [build.agent, "--listen", f"127.0.0.1:{liar_port}", "--providers", "tcp", "--bind-address", "127.0.0.1",
         "--token-file", agents.token_file, "--data-dir", work / "liar", "--import-socket", work / "liar.sock",
         *map(str, args)], name="liar", stdout=work / "liar.out", stderr=work / "liar.log")

    def denied():
        return [c for c in csrs() for cond in c.get("status", {}).get("conditions", [])
                if cond["type"] == "Denied" and c["spec"].get("extra", {}).get(
                    "authentication.kubernetes.io/pod-name") == ["agent-node-b"]]

    wait_for(lambda: denied(), 20, "the lying agent's CSR Denied", interval=0.2)
    why = next(c["message"] for c in denied()[0]["status"]["conditions"] if c["type"] == "Denied")
    assert "node-b" in why and "node-a" in why, f"the denial does not say which node: {why}"
    ready = ""
    for _ in range(50):
        assert liar.running(), f"the denied agent exited: {(work / 'liar.log').read_text()[-300:]}"
        r = requests.get(f"https://127.0.0.1:{liar_port}/readyz", verify=str(ca.cert), timeout=2)
        ready = r.text
        if r.status_code == 503 and "denied" in r.text:
            break
        time.sleep(0.1)
    assert "denied" in ready and "node-b" in ready, f"/readyz of the denied agent: {ready}"
    assert not (work / "liar.pem").exists(), "a denied agent wrote a certificate"
    ok(f"node-b's pod claiming node-a: CSR Denied ({why}); its /readyz 503: {json.loads(ready)['error']['message'][:80]}")

    # ---- 4. a restart keeps the certificate it has
    liar.terminate()  # it asks again after each denial

    def from_a():
        return [c for c in csrs()
                if c["spec"].get("extra", {}).get("authentication.kubernetes.io/pod-name") == ["agent-node-a"]]

    before = len(from_a())
    a.restart()
    assert len(from_a()) == before, "a restarted agent asked for a new certificate though its own is valid"
    ok("a restarted agent is ready at once with the certificate it kept (no new CSR)")
    report(f"per-node certificates: 2 agents signed and ready in {took:.1f} s; node-a believed for its grant only; "
           "a pod on node-b claiming node-a denied")
