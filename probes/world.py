"""The world probe: how much knowing the world is worth on a learner's latents
(docs/definitions.md#the-world-probe).

Between the linear probes (what a latent holds of the digits' state) and the learner's own D
(what its predictor turns into prediction) is the question the world model exists for: *could* a
predictor do better on these latents if it knew the world? Two predictors are fit offline on the
learner's frozen EMA-target latents (context, targets and "no change" alike), one reading the
context latents only and one also told the world's true physics (``PHYSICS_DIM``, through
``OracleContext`` into every block by adaLN-Zero, zero at its start, so both start as the same
function), each of the learner's own predictor shape (``agent.networks.BlockPredictor``, without
its output norm), and both are scored by D on held-out worlds: ``gain = 1 - D_world / D_latent``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from agent.memory.oracle import OracleContext
from agent.modulators.blocks import BlockFiLM
from agent.networks import BlockPredictor
from agent.objective import normalised_error

#: The two predictors: context latents only, and context latents with the world's physics.
PROBES = ("latent", "latent_world")


@dataclass(frozen=True)
class ProbeWorld:
    """Sequences of one world: ``frames`` (N, L, ...) as ``encode`` reads them (L >= C +
    max(horizons)), ``physics`` (PHYSICS_DIM,) its true parameters, ``family`` its family."""

    frames: np.ndarray
    physics: np.ndarray
    family: str


@dataclass(frozen=True)
class ProbeConfig:
    """The offline predictors' size and fitting budget."""

    hidden: int = 256
    blocks: int = 2
    world_dim: int = 64  # the world's code (OracleContext's width) that conditions every block
    steps: int = 1000
    batch: int = 256
    lr: float = 2e-3  # the peak of a one-cycle schedule
    seed: int = 0
    start: int = 0  # the first context frame of every window


Encode = Callable[[torch.Tensor], torch.Tensor]  # frames (M, ...) -> EMA-target latents (M, D)


@torch.no_grad()
def windows(
    encode: Encode, worlds: Sequence[ProbeWorld], context: int, horizons: Sequence[int],
    start: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[str]]:
    """One window of every sequence: context latents (N, C, D) of frames start..start+C-1,
    targets (N, K, D) at start+C-1+h, physics (N, PHYSICS_DIM); and each row's family."""
    frames_at = [*range(start, start + context), *(start + context - 1 + h for h in horizons)]
    ctx, tgt, phys, fams = [], [], [], []
    for w in worlds:
        x = torch.from_numpy(np.ascontiguousarray(np.asarray(w.frames)[:, frames_at]))
        n = x.shape[0]
        z = encode(x.flatten(0, 1)).float().view(n, len(frames_at), -1)
        ctx.append(z[:, :context])
        tgt.append(z[:, context:])
        phys.append(torch.as_tensor(np.asarray(w.physics), dtype=torch.float32).expand(n, -1))
        fams += [w.family] * n
    return torch.cat(ctx), torch.cat(tgt), torch.cat(phys), fams


class _Predictor(nn.Module):
    """Context latents (B, C, D) [and physics (B, P)] -> the horizons' latents (B, K, D) as
    changes of the newest context latent, through the learner's block predictor; told the world
    (P > 0), every block is modulated by it (adaLN-Zero)."""

    def __init__(self, context: int, latent: int, k: int, physics: int, cfg: ProbeConfig) -> None:
        super().__init__()
        self.base = BlockPredictor(latent, cfg.hidden, cfg.blocks, context, heads=k)
        self.base.norm = nn.Identity()  # the latent itself, not LayerNorm-ed: any encoder's
        self.world = (nn.ModuleList([OracleContext(cfg.world_dim, physics),
                                     BlockFiLM(cfg.world_dim, cfg.hidden, cfg.blocks)])
                      if physics else None)  # fmt: skip

    def forward(self, ctx: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        z = ctx.flatten(1)
        if self.world is None:
            return self.base(z)
        code, film = self.world
        return film(self.base, z, code(extra)).pred


def fit_predictor(
    ctx: torch.Tensor, tgt: torch.Tensor, extra: torch.Tensor, cfg: ProbeConfig
) -> nn.Module:
    """AdamW (weight decay 1e-4, a one-cycle rate to ``cfg.lr``) on the squared error over
    ``cfg.steps`` minibatches; ``extra`` (N, E) is read beside the context (E = 0: none). The
    initial weights and the minibatches depend only on ``cfg.seed`` and the shapes, so the fit
    is deterministic; the caller's random state is left as it was."""
    gen = torch.Generator().manual_seed(cfg.seed)
    n, _, d = ctx.shape
    with torch.random.fork_rng(devices=[]):  # nn.Linear's init draws from the global generator
        torch.manual_seed(cfg.seed)
        net = _Predictor(ctx.shape[1], d, tgt.shape[1], extra.shape[1], cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=cfg.steps)
    for _ in range(cfg.steps):
        i = torch.randint(0, n, (min(cfg.batch, n),), generator=gen)
        loss = (net(ctx[i], extra[i]) - tgt[i]).pow(2).sum(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return net.eval()


def d_per_horizon(pred: torch.Tensor, still: torch.Tensor, tgt: torch.Tensor,
                  eps: float = 1e-3) -> np.ndarray:
    """D per horizon (K,) of pred (B, K, D) against the targets (B, K, D) with "no change"
    ``still`` (B, D): ``agent.objective.normalised_error`` (docs/definitions.md)."""
    return normalised_error(pred, still, tgt, eps)[1].numpy()


def world_probe(
    encode: Encode,
    fit: Sequence[ProbeWorld],
    test: Sequence[ProbeWorld],
    context: int,
    horizons: Sequence[int],
    cfg: ProbeConfig = ProbeConfig(),
) -> dict[str, dict[str, list[float]]]:
    """{family: {"latent" | "latent_world": [D at each horizon..., their mean], "gain": [1 -
    D_world / D_latent at each horizon..., of the means]}} on the ``test`` worlds' families,
    and ``"pooled"`` (the families' mean), for predictors fit on the ``fit`` worlds."""
    ctx, tgt, phys, _ = windows(encode, fit, context, horizons, cfg.start)
    none = torch.zeros(len(ctx), 0)
    nets = {"latent": fit_predictor(ctx, tgt, none, cfg),
            "latent_world": fit_predictor(ctx, tgt, phys, cfg)}  # fmt: skip
    t_ctx, t_tgt, t_phys, fams = windows(encode, test, context, horizons, cfg.start)
    per_family: dict[str, dict[str, np.ndarray]] = {}
    with torch.no_grad():
        for fam in dict.fromkeys(fams):
            rows = torch.as_tensor([f == fam for f in fams])
            c, t = t_ctx[rows], t_tgt[rows]
            extra = {"latent": torch.zeros(len(c), 0), "latent_world": t_phys[rows]}
            per_family[fam] = {
                name: d_per_horizon(net(c, extra[name]), c[:, -1], t) for name, net in nets.items()
            }
    per_family["pooled"] = {
        name: np.mean([v[name] for v in per_family.values()], axis=0) for name in PROBES
    }
    out: dict[str, dict[str, list[float]]] = {}
    for fam, ds in per_family.items():
        row = {name: [*ds[name].tolist(), float(ds[name].mean())] for name in PROBES}
        gain = [1.0 - w / a for a, w in zip(row["latent"], row["latent_world"], strict=True)]
        out[fam] = {**row, "gain": gain}
    return out
