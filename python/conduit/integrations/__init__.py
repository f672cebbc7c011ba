"""Conduit inside the frameworks that already move model state: each module adapts one framework's own
extension point to the SDK (and nothing else: no private agent routes).

- :mod:`conduit.integrations.torchft`: ``ConduitTransport``, a torchft ``CheckpointTransport`` that heals a
  restarted replica by pulling a live peer's state_dict through Conduit, crc32c-verified.

docs/integrations.md says how to turn each on.
"""
