"""Seeds stacked: S learners' networks of one configuration as one set of stacked parameters
(docs/agent.md, "Seeds stacked").

Every parameter gets a leading seed dimension (``torch.func.stack_module_state``) and a function
of the networks runs once per seed under ``torch.func.vmap`` (``SeedStack.map``): each kernel
does the S seeds' work at once. Seed-major: seed s's rows of a stacked batch (S * B, ...) are
s * B .. (s + 1) * B - 1; ``map`` splits each tensor argument so, and what the function returns
comes back with a leading seed dimension (S, ...). The seeds share no parameter, so the gradient
of the sum of their losses is each seed's own, and AdamW and the EMA update are elementwise: a
stacked update is the S single updates, to the rounding of vmap's batched kernels
(``tests/agent/test_seeds.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


class _Apply(nn.Module):
    """``forward(fn, *args) = fn(module, *args)``: any function of a module as its forward, so
    ``functional_call`` can run it with other parameters."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.module, *args)


class SeedStack:
    """S modules of one architecture (e.g. ``agent.build.Networks`` of one config, S seeds),
    their parameters and buffers stacked along a leading seed dimension: ``params`` name ->
    (S, ...) leaf tensors (what an optimizer updates; requires_grad as the modules' parameters),
    ``buffers`` name -> (S, ...) tensors; ``seeds``: S."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        if len(modules) < 1:
            raise ValueError("a SeedStack needs at least one module")
        shapes = [{n: p.shape for n, p in m.state_dict().items()} for m in modules]
        if any(s != shapes[0] for s in shapes[1:]):
            raise ValueError("the stacked modules must have the same parameters and shapes")
        self.seeds = len(modules)
        self.params, self.buffers = stack_module_state(list(modules))
        # The template's own tensors are never read: each call substitutes the stacked ones.
        self._apply = _Apply(copy.deepcopy(modules[0]))
        for m in self._apply.modules():  # modules with a vmap-safe path take it
            if hasattr(m, "batched"):
                m.batched = True

    # ------------------------------------------------------------------ running
    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(S * n, ...) seed-major rows -> (S, n, ...)."""
        if x.dim() == 0 or x.shape[0] % self.seeds:
            raise ValueError(f"a stacked tensor's leading dimension must be a multiple of the "
                             f"{self.seeds} seeds, got shape {tuple(x.shape)}")  # fmt: skip
        return x.view(self.seeds, x.shape[0] // self.seeds, *x.shape[1:])

    def map(self, fn: Callable[..., Any], *args: Any, shared: Sequence[int] = ()) -> Any:
        """``fn(module, *args)`` once per seed with that seed's parameters and rows: each tensor
        argument (S * n, ...) is split seed-major (``split``), except the positions in
        ``shared``, which every seed gets whole, as do non-tensor arguments. Returns ``fn``'s
        output (a tensor or a structure of them) with a leading seed dimension."""
        seeded = [isinstance(a, torch.Tensor) and i not in shared for i, a in enumerate(args)]
        split = tuple(self.split(a) if s else a for a, s in zip(args, seeded, strict=True))
        in_dims = tuple(0 if s else None for s in seeded)

        def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], *a: Any) -> Any:
            state = {f"module.{n}": t for n, t in (*params.items(), *buffers.items())}
            return functional_call(self._apply, state, (fn, *a))

        return vmap(one, in_dims=(0, 0, *in_dims), randomness="error")(self.params, self.buffers, *split)

    # ------------------------------------------------------------------ state
    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """Each seed's state dict (its parameters and buffers, in the template's order), as
        the single module's ``state_dict()`` keys it: copies, detached."""
        stacked = {**self.params, **self.buffers}
        names = list(self._apply.module.state_dict())
        return [{n: stacked[n][s].detach().clone() for n in names} for s in range(self.seeds)]

    def load_state_dicts(self, states: Sequence[dict[str, torch.Tensor]]) -> None:
        """Copy S single state dicts (``state_dicts``' layout) into the stacked tensors, in
        place (an optimizer over ``params`` keeps them)."""
        if len(states) != self.seeds:
            raise ValueError(f"expected {self.seeds} state dicts, got {len(states)}")
        with torch.no_grad():
            for name, t in (*self.params.items(), *self.buffers.items()):
                t.copy_(torch.stack([s[name] for s in states]))
