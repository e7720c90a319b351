"""Tracks A-E on the listing's predictor (``agent.networks.Predictor``), at its hidden layer:
A (V-JEPA) none, B (EI-JEPA) a residual input, C (EPM-JEPA, the paper's listing) LoRA deltas of
both layers, D FiLM (paper: future work), E a hypernetwork's full-rank deltas of the first."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor, low_rank, mixed


class NoModulator(Modulator):
    """Prediction = predictor(z). ``proj_B`` (exp_dim -> hidden) exists, frozen, never used
    (parameter parity with B)."""

    uses_memory = False

    def __init__(self, exp_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.proj_B = nn.Linear(exp_dim, hidden_dim)
        self.proj_B.requires_grad_(False)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg ignored -> pred (B, latent)."""
        return Modulated(predictor(z), None)


class ResidualModulator(Modulator):
    """h1 = GELU(W1 z + b1) + proj_B(e_agg); pred = norm(W2 h1 + b2)."""

    def __init__(self, exp_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.proj_B = nn.Linear(exp_dim, hidden_dim)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg (B, exp_dim) -> pred (B, latent)."""
        return Modulated(predictor.readout(predictor.hidden(z) + self.proj_B(e_agg)), None)


class LoRAModulator(Modulator):
    """W_l^eff = W_l + U_l diag(delta_l) V_l^T, delta_l = Linear(e_agg) (no bias), rank r.

    u1 (hidden, r), v1 (in, r) for fc1; u2 (out, r), v2 (hidden, r) for fc2; all N(0, 0.02)
    (in = out = latent in the paper; the predictor's ``in_dim`` / ``out_dim`` beyond it). With
    e_agg = 0 the deltas are 0 and the output equals the base predictor's, bit for bit
    (x + 0 == x).
    """

    def __init__(
        self, in_dim: int, hidden_dim: int, exp_dim: int, rank: int, out_dim: int | None = None
    ) -> None:
        super().__init__()
        self.u1 = nn.Parameter(torch.empty(hidden_dim, rank))
        self.v1 = nn.Parameter(torch.empty(in_dim, rank))
        self.u2 = nn.Parameter(torch.empty(in_dim if out_dim is None else out_dim, rank))
        self.v2 = nn.Parameter(torch.empty(hidden_dim, rank))
        self.delta1_gen = nn.Linear(exp_dim, rank, bias=False)
        self.delta2_gen = nn.Linear(exp_dim, rank, bias=False)
        for param in (self.u1, self.v1, self.u2, self.v2):
            nn.init.normal_(param, std=0.02)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, in), e_agg (B, exp_dim) -> pred (``Predictor.finish``), scales (B, 2r)."""
        delta1 = self.delta1_gen(e_agg)  # (B, r)
        delta2 = self.delta2_gen(e_agg)  # (B, r)
        h1 = predictor.act(predictor.fc1(z) + low_rank(z, self.v1, delta1, self.u1))
        h2 = predictor.fc2(h1) + low_rank(h1, self.v2, delta2, self.u2)
        return Modulated(predictor.finish(h2), torch.cat([delta1, delta2], dim=-1))


class FiLMModulator(Modulator):
    """h1 = GELU(W1 z + b1) * (1 + g) + b, (g, b) = Linear(e_agg) with no bias.

    Bias-free, so e_agg = 0 gives g = b = 0 and the base predictor exactly.
    """

    def __init__(self, exp_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.film = nn.Linear(exp_dim, 2 * hidden_dim, bias=False)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg (B, exp_dim) -> pred (B, latent), scales (B, 2 hidden)."""
        gb = self.film(e_agg)  # (B, 2 hidden)
        g, b = gb.chunk(2, dim=-1)
        h1 = predictor.hidden(z) * (1.0 + g) + b
        return Modulated(predictor.readout(h1), gb)


class HyperModulator(Modulator):
    """DeltaW1 = sum_j c_j H_j, c = Linear(e_agg) (no bias, size m = hyper_dim).

    Each H_j (hidden, latent) is a full-rank learned basis matrix (N(0, 0.02)), so the
    generated delta is full rank (unlike LoRA's rank r), in an m-dimensional family.
    Applied per sample without materialising (B, hidden, latent):
    DeltaW1_b z_b = (c_b (x) z_b) @ H.view(m * latent, hidden). e_agg = 0 gives c = 0 and the
    base predictor exactly.
    """

    def __init__(self, in_dim: int, hidden_dim: int, exp_dim: int, hyper_dim: int) -> None:
        super().__init__()
        self.code = nn.Linear(exp_dim, hyper_dim, bias=False)
        self.bases = nn.Parameter(torch.empty(hyper_dim * in_dim, hidden_dim))
        nn.init.normal_(self.bases, std=0.02)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, in), e_agg (B, exp_dim) -> pred (``Predictor.readout``), scales (B, m)."""
        c = self.code(e_agg)  # (B, m)
        h1 = predictor.act(predictor.fc1(z) + mixed(z, c, self.bases))
        return Modulated(predictor.readout(h1), c)
