"""The suite's shared cluster (dra/cluster.py): one apiserver, scheduler and controller-manager for every test."""

from dra.cluster import cluster  # noqa: F401 -- the module-scoped fixture
