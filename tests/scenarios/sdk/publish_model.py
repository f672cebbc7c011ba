"""The model the publish tests move: 150 linear layers (weight and bias, in turn float32, float16, bfloat16)
and an int8 buffer each, 450 tensors and about 256 MiB at WIDTH 768, initialised from SEED."""

from __future__ import annotations

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Model(torch.nn.Module):
    def __init__(self, seed: int, width: int = 768, layers: int = 150) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layers = torch.nn.ModuleList()
        for i in range(layers):
            layer = torch.nn.Linear(width, width).to(DTYPES[i % 3])
            layer.register_buffer("scale", torch.randint(-128, 127, (width,), dtype=torch.int8))
            self.layers.append(layer)


def same(a: torch.nn.Module, b: torch.nn.Module) -> list[str]:
    """The names whose tensors differ between A and B (none: every one torch.equal)."""
    sa, sb = a.state_dict(), b.state_dict()
    return [n for n in sa if not torch.equal(sa[n], sb[n])]
