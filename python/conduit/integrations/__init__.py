"""Conduit inside the frameworks that already move model state: each module adapts one framework's own
extension point to the SDK (and nothing else: no private agent routes).

- :mod:`conduit.integrations.torchft`: ``ConduitTransport``, a torchft ``CheckpointTransport`` that heals a
  restarted replica by pulling a live peer's state_dict through Conduit, crc32c-verified.
- :mod:`conduit.integrations.vllm`: the ``conduit`` weight-transfer backend of vLLM (engine and trainer side,
  registered by the ``vllm.general_plugins`` entry point): a trainer publishes its weights, each engine node's
  agent receives them crc32c-verified, and every engine loads them through vLLM's own in-place reload, each name, dtype and shape checked first.

docs/integrations.md says how to turn each on.
"""
