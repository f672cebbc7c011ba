"""Conduit's Python SDK: the node agent's REST API, zero-copy shared buffers, region versions, TransferJobs and
named tensors (conduit.tensors: a state_dict laid out in one buffer, viewed and applied in place).

    from conduit import Agent, Target

    a, b = Agent("http://node-a:7070"), Agent("http://node-b:7070")
    with a.allocate("weights", 1 << 20) as buf:
        buf.numpy()[:] = 7
        a.transfer("weights", [Target(b, "weights")]).wait()

docs/python.md has the whole of it.
"""

from .acks import Ack, Acks
from .agent import Agent, Grant, Region, Target
from .buffers import SharedBuffer
from .errors import (AgentMismatch, ConduitError, Conflict, Forbidden, InvalidArgument, NotFound, TooManyRequests,
                     TensorMismatch, TransferFailed, Unauthorized, Unavailable, Unprocessable)
from .jobs import JobTarget, KubeJobs, LocalJobs, TransferJob
from .manifest import Manifest, Placement, TensorSpec
from .placement import Replicate, Shard
from .publish import Published, Publisher, Subscriber, publish, subscribe
from .reshard import Resharder, ReshardFailed, ReshardResult, reshard
from .reshard_plan import ReshardBatch, ReshardPlan
from .transfers import Transfer, TransferStatus
from .versions import DoubleBuffer, Slot, Update

__version__ = "0.1.0"

__all__ = [
    "Ack", "Acks", "Agent", "AgentMismatch", "ConduitError", "Conflict", "DoubleBuffer", "Forbidden", "Grant", "InvalidArgument",
    "JobTarget", "KubeJobs", "LocalJobs", "Manifest", "NotFound", "Placement", "Published", "Publisher", "Subscriber", "Region",
    "Replicate", "ReshardBatch", "ReshardFailed", "ReshardPlan", "ReshardResult", "Resharder", "Shard", "SharedBuffer", "Slot", "Target",
    "TensorMismatch", "TensorSpec", "TooManyRequests", "Transfer", "TransferFailed", "TransferJob", "TransferStatus", "Unauthorized",
    "Unavailable", "Unprocessable", "Update", "__version__", "publish", "reshard", "subscribe",
]
