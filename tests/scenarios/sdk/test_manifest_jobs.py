"""A TransferJob from a region that names its tensors makes target regions that name them too, through a
real local-mode controller between real agents (docs/tensors.md)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from harness import LocalController, MiB

import conduit
from conduit import JobTarget, LocalJobs, Manifest, TransferJob

SIZE = 2 * MiB


def test_a_jobs_created_targets_carry_the_sources_manifest(nodes: Callable[..., list[conduit.Agent]],
                                                          local_controller: Callable[..., LocalController]) -> None:
    a, b, c = nodes("node-a", "node-b", "node-c")
    jobs = LocalJobs(local_controller().jobs_dir)
    manifest = Manifest.from_json({
        "tensors": [{"name": "model.embed_tokens.weight", "dtype": "BF16", "shape": [512, 1024], "offset": 0,
                     "length": MiB},
                    {"name": "model.norm.weight", "dtype": "F32", "shape": [256, 1024], "offset": MiB,
                     "length": MiB}],
        "metadata": {"format": "pt"}})
    with a.allocate("weights", SIZE) as buf:
        buf.numpy()[:] = np.random.default_rng(3).integers(0, 256, SIZE, dtype=np.uint8)
        a.set_manifest("weights", manifest)
        jobs.apply(TransferJob("named", source_node="node-a", source_region="weights",
                               targets=[JobTarget("node-b", "weights", create_bytes=SIZE),
                                        JobTarget("node-c", "weights", create_bytes=SIZE)],
                               strategy="Fanout", transport="tcp", verify="crc32c"))
        status = jobs.wait("named", timeout=30)
        assert status["phase"] == "Succeeded", status
        for agent in (b, c):
            assert agent.manifest("weights") == manifest, agent.url
            assert agent.region("weights").raw["tensors"] == 2
            assert agent.checksum("weights") == a.checksum("weights")
