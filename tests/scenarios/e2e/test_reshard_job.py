"""A TransferJob with strategy Reshard (issue 35; docs/reshard.md, "TransferJob strategy: Reshard"): trainer pods
holding tensor-parallel dim-0 shards of a few tensors into inference pods holding dim-1 shards, through the real
apiserver, the controller in Kubernetes mode and real agents, the pods as the pods suite makes them
(test_pods.py: Pod objects bound to nodes, a process in the pod's cgroup sharing its region with its node's
agent, the Pod's status as the kubelet reports it).

Every pod's region carries a manifest with placements (each tensor's global shape and this rank's slice). The
bytes come from known global arrays; afterwards every target byte must equal the global arrays sliced the
target's way, every target region be at one version K (their common version + 1), and status.reshard show the
plan. A second job whose target manifest disagrees with the sources' global shape is refused before a byte
moves (ReshardRefused, naming the tensor), its target's bytes and version untouched.
"""

import time

import numpy as np
import pytest
from e2e.test_pods import UNTOUCHED, cluster  # noqa: F401 (the fixture)
from e2e.util import ok

# name -> (dtype, numpy dtype, global shape). Shapes split evenly in two along both dims.
TENSORS = {
    "layers.0.attn.q": ("F32", np.float32, (8, 6)),
    "layers.0.mlp.up": ("F32", np.float32, (6, 10)),
    "embed": ("I8", np.int8, (12, 4)),
    "layers.0.mlp.down": ("BF16", np.uint16, (10, 6)),
}


def global_arrays():
    rng = np.random.default_rng(35)
    out = {}
    for name, (_, np_dtype, shape) in TENSORS.items():
        info = np.iinfo(np_dtype) if np.issubdtype(np_dtype, np.integer) else None
        if info is not None:
            out[name] = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np_dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(np_dtype)
    return out


def shard(arrays, dim, rank, ranks):
    """This rank's region bytes and manifest when every tensor is split evenly along DIM across RANKS."""
    blob, tensors = bytearray(), []
    for name, (dtype, _, shape) in TENSORS.items():
        step = shape[dim] // ranks
        index = [slice(None)] * len(shape)
        index[dim] = slice(rank * step, (rank + 1) * step)
        part = np.ascontiguousarray(arrays[name][tuple(index)])
        blob += b"\0" * (-len(blob) % 8)  # every tensor 8-byte aligned
        start = [0] * len(shape)
        start[dim] = rank * step
        tensors.append({"name": name, "dtype": dtype, "shape": list(part.shape), "offset": len(blob),
                        "length": part.nbytes, "placement": {"globalShape": list(shape), "start": start}})
        blob += part.tobytes()
    return bytes(blob), {"tensors": tensors, "metadata": {}}


def share(c, agents, work, name, node, labels, data, manifest, region="weights", fill=True):
    """Pod NAME on NODE sharing REGION (DATA's bytes, or UNTOUCHED) with MANIFEST set on it."""
    path = work / f"{name}.bin"
    path.write_bytes(data)
    c.pod(name, node, labels, region=region, nbytes=len(data), fill_from=path if fill else None)
    agents[node].request("PUT", f"/v1/regions/{region}/manifest", manifest)
    return c.pods[name]


def trainers(c, agents, work, arrays):
    """trainer-0 on node-a and trainer-1 on node-b sharing dim-0 shards of every tensor as "weights"."""
    for rank, (pod, node) in enumerate((("trainer-0", "node-a"), ("trainer-1", "node-b"))):
        data, manifest = shard(arrays, 0, rank, 2)
        share(c, agents, work, pod, node, {"app": "trainer"}, data, manifest)


def test_reshard_job_moves_tp_rows_into_tp_columns_at_one_version(cluster, agents, work, report):  # noqa: F811
    c = cluster("node-a", "node-b", "node-c", "node-d")
    arrays = global_arrays()
    trainer, infer = {"app": "trainer"}, {"app": "infer"}
    expected = {}
    trainers(c, agents, work, arrays)
    for rank, (pod, node) in enumerate((("infer-0", "node-c"), ("infer-1", "node-d"))):
        data, manifest = shard(arrays, 1, rank, 2)
        expected[pod] = data
        share(c, agents, work, pod, node, infer, bytes([UNTOUCHED]) * len(data), manifest, fill=False)
    versions = {n: agents[n].get("/v1/regions/weights").get("version") for n in ("node-c", "node-d")}
    assert len(set(versions.values())) == 1, f"the target regions start at different versions: {versions}"
    k = next(iter(versions.values())) + 1
    ok(f"pods: trainer-0/1 hold dim-0 shards of {len(TENSORS)} tensors, infer-0/1 dim-1 layouts at version "
       f"{k - 1}")

    t0 = time.monotonic()
    c.apply("sync", strategy="Reshard", source={"podSelector": {"matchLabels": trainer}, "region": "weights"},
            targets=[{"podSelector": {"matchLabels": infer}, "region": "weights"}])
    done = c.finish("sync")
    took = time.monotonic() - t0
    assert done.get("phase") == "Succeeded", f"the reshard: {done}"
    for pod in ("infer-0", "infer-1"):
        got = c.pods[pod].dump(work / f"{pod}.dump").read_bytes()
        assert got == expected[pod], f"pod {pod}'s bytes are not the global arrays sliced its way"
    for node in ("node-c", "node-d"):
        v = agents[node].get("/v1/regions/weights").get("version")
        assert v == k, f"target region on {node} at version {v}, want {k}"
    reshard = done.get("reshard") or {}
    assert reshard.get("version") == k and reshard.get("pairs") == 4 and reshard.get("batches") == 4, reshard
    # The two inference layouts partition every tensor: the plan moves each global byte once.
    assert reshard.get("bytes") == sum(a.nbytes for a in arrays.values()), reshard
    pairs = {(p["sourcePod"], p["targetPod"]): p for p in reshard.get("pairList") or []}
    assert set(pairs) == {(s, t) for s in ("trainer-0", "trainer-1") for t in ("infer-0", "infer-1")}, pairs
    assert all(p["state"] == "Succeeded" and p["attempts"] == 1 for p in pairs.values()), pairs
    # seconds: startTime to completionTime, which a job of 600 bytes may end within (0 then).
    assert (reshard.get("busiest") or {}).get("bytes", 0) > 0 and reshard.get("seconds", -1) >= 0, reshard
    # The agents state a 10 Gbit/s link (--link-rate): the busiest link's bytes over it, and the job against it.
    rate = c.k.get("/apis/conduit.dev/v1alpha1/fabricnodes/node-a").get("status", {}).get("linkBytesPerSecond")
    assert rate == 1.25e9, f"FabricNode node-a's linkBytesPerSecond: {rate}"
    assert reshard.get("lowerBoundSeconds") == reshard["busiest"]["bytes"] / 1.25e9, reshard
    assert reshard.get("againstLowerBound") == pytest.approx(reshard["seconds"] / reshard["lowerBoundSeconds"]), \
        reshard
    targets = [(t.get("pod"), t.get("state"), t.get("version")) for t in done.get("targets") or []]
    assert targets == [("infer-0", "Succeeded", k), ("infer-1", "Succeeded", k)], done.get("targets")
    ok(f"Reshard trainer-0/1 (dim 0) -> infer-0/1 (dim 1): Succeeded in {took:.1f} s, every target byte equal "
       f"to the global arrays sliced by columns, both targets at version {k}; plan {reshard.get('fingerprint')}")
    report(f"Reshard 2 trainer pods (TP2 rows) -> 2 inference pods (TP2 columns): {reshard.get('bytes')} bytes "
           f"in {reshard.get('batches')} batches, {took:.1f} s, targets at version {k}")


def test_reshard_job_refuses_a_target_layout_the_sources_do_not_match_before_a_byte_moves(
        cluster, agents, work, report):  # noqa: F811
    c = cluster("node-a", "node-b", "node-c")
    arrays = global_arrays()
    trainers(c, agents, work, arrays)
    trainer = {"app": "trainer"}
    bad_manifest = shard(arrays, 1, 0, 2)[1]
    bad_manifest["tensors"][0]["placement"]["globalShape"] = [8, 7]  # the sources say [8, 6]
    size = max(t["offset"] + t["length"] for t in bad_manifest["tensors"])
    share(c, agents, work, "bad-0", "node-c", {"app": "bad"}, bytes([UNTOUCHED]) * size, bad_manifest,
          region="bad", fill=False)
    before = agents["node-c"].get("/v1/regions/bad").get("version")
    c.apply("refused", strategy="Reshard", backoffLimit=0,
            source={"podSelector": {"matchLabels": trainer}, "region": "weights"},
            targets=[{"podSelector": {"matchLabels": {"app": "bad"}}, "region": "bad"}])
    done = c.finish("refused", timeout=30)
    failed = c.condition("refused", "Failed")
    assert done.get("phase") == "Failed" and failed.get("reason") == "ReshardRefused", done
    assert "layers.0.attn.q" in failed.get("message", ""), f"the refusal does not name the tensor: {failed}"
    assert c.pods["bad-0"].dump(work / "bad-0.dump").read_bytes() == bytes([UNTOUCHED]) * size, \
        "a refused reshard wrote bytes"
    assert agents["node-c"].get("/v1/regions/bad").get("version") == before, "a refused reshard moved a version"
    ok(f"a target with another global shape: Failed ReshardRefused before a byte moved: {failed.get('message')}")
    report("Reshard into a target whose manifest says another global shape: Failed ReshardRefused, nothing written")
