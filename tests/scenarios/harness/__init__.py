"""The scenario suites' harness: real conduit processes on this machine, nothing mocked.

Modules: ``processes`` (children that cannot outlive a test), ``netns`` (nodes as network namespaces, tc),
``agents`` (conduit-agent processes and their REST API), ``controller`` (conduit-controller runs, local-mode
job files), ``kube`` (a real etcd + kube-apiserver, kubectl), ``wait`` (bounded waits). The pytest fixtures
that tie them to a test are in tests/scenarios/conftest.py.
"""

from .checks import assert_retried, assert_succeeded, assert_verified, retries
from .agents import MiB, Agent, AgentPool, Build, new_token, random_file
from .controller import Controller, LocalController, condition, condition_text, file_job, transfer_job
from .kube import KubeEnv, KubeToolsMissing, agent_endpointslice
from .netns import Network
from .processes import Process, ProcessSet
from .wait import now, since, wait_for

__all__ = [
    "assert_retried", "assert_succeeded", "assert_verified", "retries",
    "MiB", "Agent", "AgentPool", "Build", "new_token", "random_file",
    "Controller", "LocalController", "condition", "condition_text", "file_job", "transfer_job",
    "KubeEnv", "KubeToolsMissing", "agent_endpointslice",
    "Network", "Process", "ProcessSet", "now", "since", "wait_for",
]
