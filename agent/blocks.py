"""A predictor of residual blocks, so that a modulation can act in every block.

The listing's predictor has one hidden layer, so a track's modulation acts once, with one layer
after it to turn what it is told into a move. Measured offline on a run's frozen latents
(docs/results.md, "A world model that uses what it is told"), a predictor takes far more of the
world when the condition enters several residual blocks (DiT's adaLN-Zero, FiLM in every block,
DyAd's AdaIN in all blocks). ``BlockPredictor`` (``cfg.predictor_blocks`` > 0) is that shape:

    h = inp(z);  h = h + block_i(h) for i < N;  pred = norm(z_last + out(h))  per horizon

with ``block_i(h) = fc_b(act(fc_a(ln(h))))`` (a pre-norm MLP of ``hidden_dim``), the output a
change of the newest context latent (so "no change" is out = 0) and LayerNorm-ed as the
encoder's latents. A modulator acts by running each block itself (``run_block``): the per-block
modulators are in ``agent.modulators.blocks``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from agent.config import AgentConfig


class Block(nn.Module):
    """One residual block's branch: fc_b(act(fc_a(ln(h)))), ln without affine parameters."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width, elementwise_affine=False)
        self.fc_a = nn.Linear(width, width)
        self.act = nn.GELU()
        self.fc_b = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc_b(self.act(self.fc_a(self.ln(h))))


#: How a modulator runs block i on the hidden state h: (i, block, h) -> the block's branch.
RunBlock = Callable[[int, Block, torch.Tensor], torch.Tensor]


class BlockPredictor(nn.Module):
    """The C context latents (B, C * latent) -> one latent per horizon (B, K, latent), or one
    latent (B, latent) with one head, through ``blocks`` residual blocks of ``hidden_dim``."""

    def __init__(
        self, latent_dim: int, hidden_dim: int, blocks: int, context: int = 1, heads: int = 1
    ) -> None:
        super().__init__()
        self.latent_dim, self.heads, self.hidden_dim = latent_dim, heads, hidden_dim
        self.in_dim, self.out_dim = context * latent_dim, heads * latent_dim
        self.inp = nn.Linear(self.in_dim, hidden_dim)
        self.blocks = nn.ModuleList(Block(hidden_dim) for _ in range(blocks))
        self.out = nn.Linear(hidden_dim, self.out_dim)
        self.norm = nn.LayerNorm(latent_dim)

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> BlockPredictor:
        return cls(cfg.latent_dim, cfg.hidden_dim, cfg.predictor_blocks, cfg.context_frames,
                   cfg.out_heads)  # fmt: skip

    def finish(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """out's output (B, K * latent) -> norm(z_last + y) per horizon: (B, K, latent), or
        (B, latent) with one head; z (B, C * latent) the input."""
        last = z[:, -self.latent_dim :]
        if self.heads == 1:
            return self.norm(last + y)
        return self.norm(last.unsqueeze(1) + y.unflatten(-1, (self.heads, self.latent_dim)))

    def forward(self, z: torch.Tensor, run_block: RunBlock | None = None) -> torch.Tensor:
        """(B, in_dim) -> the prediction; each block's branch by ``run_block`` where given (a
        modulator's), else the block itself (the base predictor)."""
        h = self.inp(z)
        for i, block in enumerate(self.blocks):
            h = h + (block(h) if run_block is None else run_block(i, block, h))
        return self.finish(self.out(h), z)
