"""A paper-faithful reference training step: the yardstick for every learner figure.

Written from the paper's Section 3 and the code listings of its appendix as literally as
possible: the listings' `Encoder`, `Predictor`, `LoRAModulator`, `BoundaryDetector` (with its
per-step `.item()`, a host sync), `pred_loss` / `reg_loss` / `compute_loss`; a Python-side FIFO
experience buffer of detached latent pairs; an experience encoder (2-layer
`nn.TransformerEncoder`, d 64, 2 heads, ff 128, each pair a 2-token sequence, mean-pooled); a
single-head attention aggregation with the query from the current latent; an EMA target encoder
with the cosine tau schedule updated by a plain parameter loop; AdamW with one parameter group;
fp32; a plain PyTorch loop with no `torch.compile`.

The step is the paper's dataset protocol: input frame 0, targets frames 5, 10, 20 from the EMA
encoder; on a boundary the batch-mean pair (z_19, z_20) of the online encoder is pushed.

The only departures from the listings: hyperparameters are fields of `RefConfig` (passed to the
constructors) rather than module globals, and the detector's surprisal averages the base
predictor's error over the three horizon targets (docs/definitions.md#surprisal) by
feeding the listing's `update(z_curr, z_pred)` the stacked targets.

Nothing in the product imports this module; it lives in `benchmarks/` only.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

TRACKS = ("A", "B", "C")
_TRACK_LR = {"A": 3e-3, "B": 2e-3, "C": 3e-3}
_TRACK_KAPPA = {"A": float("inf"), "B": 2.0, "C": 1.5}


@dataclass(frozen=True)
class RefConfig:
    """The paper's Tables 4-5 (and Section 3) as one small config."""

    track: str = "C"  # A (no memory), B (residual injection), C (LoRA modulation)
    latent_dim: int = 64  # LATENT_DIM
    hidden_dim: int = 1024  # HIDDEN_DIM
    batch_size: int = 64  # BATCH_SIZE
    horizons: tuple[int, ...] = (5, 10, 20)  # prediction horizons k
    lr: float | None = None  # LEARNING_RATE; None = the track's value (3e-3 / 2e-3 / 3e-3)
    weight_decay: float = 0.01  # WEIGHT_DECAY
    warmup_frac: float = 0.05  # WARMUP_FRAC of the run used for linear LR warmup
    total_steps: int = 10_000  # step budget of the schedules (600 s at 17.6 steps/s ~ 10,569)
    tau_base: float = 0.996  # EMA_TAU_BASE
    tau_end: float = 0.9999  # EMA_TAU_END
    gamma: float = 0.75  # GAMMA, variance hinge threshold
    lambda_reg: float = 0.05  # LAMBDA_REG
    buffer_capacity: int = 256  # BUFFER_CAP
    kappa: float | None = None  # KAPPA; None = the track's value (B 2.0, C 1.5)
    detector_momentum: float = 0.99  # EMA_MOMENTUM of the detector
    detector_warmup: int = 10  # steps before a boundary may fire
    exp_dim: int = 64  # EXP_DIM
    exp_layers: int = 2  # EXP_LAYERS
    exp_heads: int = 2  # EXP_HEADS
    exp_ff_dim: int = 128  # EXP_FF_DIM
    exp_dropout: float = 0.1  # the paper is silent: nn.TransformerEncoderLayer's default
    lora_rank: int = 4  # LORA_RANK
    seed: int = 0  # torch seed for the initial weights

    def __post_init__(self) -> None:
        if self.track not in TRACKS:
            raise ValueError(f"track: expected one of {TRACKS}, got {self.track!r}")

    @property
    def track_lr(self) -> float:
        return _TRACK_LR[self.track] if self.lr is None else self.lr

    @property
    def track_kappa(self) -> float:
        return _TRACK_KAPPA[self.track] if self.kappa is None else self.kappa


# ---------------------------------------------------------------- listings 1-2: networks
class Encoder(nn.Module):
    """Small CNN encoder: single grayscale frame -> 64-dim latent (listing 1, ~172k params)."""

    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, kernel_size=4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=4, stride=2, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.proj = nn.Linear(64 * 4 * 4, cfg.latent_dim)
        self.norm = nn.LayerNorm(cfg.latent_dim)

    def forward(self, x):
        """(B, 1, 64, 64) -> (B, LATENT_DIM)."""
        return self.norm(self.proj(self.conv(x).flatten(1)))


class Predictor(nn.Module):
    """2-layer MLP predictor: latent -> predicted future latent (listing 2)."""

    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.latent_dim, cfg.hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(cfg.hidden_dim, cfg.latent_dim)
        self.norm = nn.LayerNorm(cfg.latent_dim)

    def forward(self, z, a=None):  # pylint: disable=unused-argument
        """(B, LATENT_DIM) -> (B, LATENT_DIM). a ignored (Moving MNIST has no actions)."""
        return self.norm(self.fc2(self.act(self.fc1(z))))


# ---------------------------------------------------------------- listing 3: track C
class LoRAModulator(nn.Module):
    """Low-rank Delta-W modulation of predictor fc1 and fc2 (listing 3)."""

    def __init__(self, cfg: RefConfig):
        super().__init__()
        r = cfg.lora_rank
        self.u1 = nn.Parameter(torch.empty(cfg.hidden_dim, r))
        self.v1 = nn.Parameter(torch.empty(cfg.latent_dim, r))
        self.u2 = nn.Parameter(torch.empty(cfg.latent_dim, r))
        self.v2 = nn.Parameter(torch.empty(cfg.hidden_dim, r))
        self.delta1_gen = nn.Linear(cfg.exp_dim, r, bias=False)
        self.delta2_gen = nn.Linear(cfg.exp_dim, r, bias=False)
        for param in (self.u1, self.v1, self.u2, self.v2):
            nn.init.normal_(param, std=0.02)

    def forward(self, predictor: Predictor, z: torch.Tensor, e_agg: torch.Tensor) -> torch.Tensor:
        """z (B, LATENT_DIM), e_agg (B, EXP_DIM) (zeros when the buffer is empty) -> (B, LATENT_DIM)."""
        delta1 = self.delta1_gen(e_agg)  # (B, r)
        delta2 = self.delta2_gen(e_agg)  # (B, r)
        # fc1 + DeltaW1: GELU((W1 + U1@diag(delta1)@V1.T) @ z)
        h1 = predictor.act(predictor.fc1(z) + (z @ self.v1) * delta1 @ self.u1.T)
        # fc2 + DeltaW2: (W2 + U2@diag(delta2)@V2.T) @ h1
        h2 = predictor.fc2(h1) + (h1 @ self.v2) * delta2 @ self.u2.T
        return predictor.norm(h2)

    def delta_scales(self, e_agg: torch.Tensor) -> tuple:
        """Return (delta1, delta2) scale tensors - used for monitoring LoRA activity."""
        return self.delta1_gen(e_agg), self.delta2_gen(e_agg)


# ---------------------------------------------------------------- listing 4: detector
class BoundaryDetector:
    """Surprisal-gated event boundary detector (listing 4); Python floats, one host sync."""

    def __init__(self, cfg: RefConfig):
        self.momentum = cfg.detector_momentum
        self.kappa = cfg.track_kappa
        self.warmup = cfg.detector_warmup
        self.mu_s = 0.0  # EMA mean of surprisal
        self.var_s = 1.0  # EMA variance (start high to suppress early spurious fires)
        self._steps = 0
        self.last_surprisal = 0.0

    def reset(self):
        """Reset running statistics - call between independent training runs."""
        self.mu_s = 0.0
        self.var_s = 1.0
        self._steps = 0

    @torch.no_grad()
    def update(self, z_curr: torch.Tensor, z_pred: torch.Tensor) -> bool:
        """z_curr, z_pred (B, LATENT_DIM) -> True if this step is a boundary event."""
        s = float(torch.norm(z_curr - z_pred, dim=-1).mean().item())  # host sync here
        self.last_surprisal = s
        old_mu = self.mu_s
        self.mu_s = self.momentum * self.mu_s + (1.0 - self.momentum) * s
        self.var_s = self.momentum * self.var_s + (1.0 - self.momentum) * (s - old_mu) ** 2
        self._steps += 1
        if self._steps < self.warmup:
            return False
        return s > self.mu_s + self.kappa * math.sqrt(max(self.var_s, 1e-8))


# ---------------------------------------------------------------- memory (Section 3)
class ExperienceBuffer:
    """FIFO of detached (z_prev, z_curr) batch-mean latent pairs, kept as a Python list."""

    def __init__(self, cfg: RefConfig):
        self.capacity = cfg.buffer_capacity
        self.entries: list[tuple[torch.Tensor, torch.Tensor]] = []

    def push(self, z_prev: torch.Tensor, z_curr: torch.Tensor) -> None:
        self.entries.append((z_prev.detach(), z_curr.detach()))
        if len(self.entries) > self.capacity:
            self.entries.pop(0)  # evict the oldest

    def __len__(self) -> int:
        return len(self.entries)

    def as_pairs(self) -> torch.Tensor:
        """-> (N, 2, LATENT_DIM): each stored transition as a 2-token sequence."""
        return torch.stack([torch.stack(pair) for pair in self.entries])


class ExperienceEncoder(nn.Module):
    """2-layer transformer over each stored pair (2 tokens), mean-pooled to e_i (EXP_DIM)."""

    def __init__(self, cfg: RefConfig):
        super().__init__()
        self.inp = (
            nn.Identity()
            if cfg.latent_dim == cfg.exp_dim
            else nn.Linear(cfg.latent_dim, cfg.exp_dim)
        )
        layer = nn.TransformerEncoderLayer(
            d_model=cfg.exp_dim,
            nhead=cfg.exp_heads,
            dim_feedforward=cfg.exp_ff_dim,
            dropout=cfg.exp_dropout,
            batch_first=True,
        )
        self.transformer = nn.TransformerEncoder(layer, num_layers=cfg.exp_layers)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        """(N, 2, LATENT_DIM) -> (N, EXP_DIM)."""
        return self.transformer(self.inp(pairs)).mean(dim=1)


class AttentionAggregator(nn.Module):
    """Single-head soft attention of the current latent over the encoded buffer entries."""

    def __init__(self, cfg: RefConfig):
        super().__init__()
        # W_q, W_k, W_e as in the paper's formula (linear maps, no bias)
        self.w_q = nn.Linear(cfg.latent_dim, cfg.exp_dim, bias=False)
        self.w_k = nn.Linear(cfg.exp_dim, cfg.exp_dim, bias=False)
        self.w_e = nn.Linear(cfg.exp_dim, cfg.exp_dim, bias=False)
        self.scale = 1.0 / math.sqrt(cfg.exp_dim)

    def forward(self, z: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """z (B, LATENT_DIM), e (N, EXP_DIM) -> e_agg (B, EXP_DIM)."""
        alpha = torch.softmax(self.w_q(z) @ self.w_k(e).T * self.scale, dim=-1)  # (B, N)
        return self.w_e(alpha @ e)


# ---------------------------------------------------------------- listing 5: objective
def pred_loss(z_pred: torch.Tensor, z_targets: list) -> torch.Tensor:
    """Mean MSE over horizon targets. Stopgrad applied to each target here."""
    total = sum(nn.functional.mse_loss(z_pred, zt.detach()) for zt in z_targets)
    return total / len(z_targets)


def reg_loss(z_pred: torch.Tensor, gamma: float) -> torch.Tensor:
    """VICReg variance term: mean_d(max(0, GAMMA - std_b(z_pred[:, d])))."""
    return torch.clamp(gamma - z_pred.std(dim=0), min=0.0).mean()


def compute_loss(z_pred: torch.Tensor, z_targets: list, gamma: float, lambda_reg: float) -> tuple:
    """Return (total, l_pred, l_reg) - all scalar tensors."""
    lp = pred_loss(z_pred, z_targets)
    lr = reg_loss(z_pred, gamma)
    return lp + lambda_reg * lr, lp, lr


# ---------------------------------------------------------------- schedules
def lr_at(cfg: RefConfig, step: int) -> float:
    """Linear warmup over warmup_frac of the run, then cosine decay to zero."""
    warm = max(1, int(cfg.warmup_frac * cfg.total_steps))
    if step < warm:
        return cfg.track_lr * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, cfg.total_steps - warm))
    return cfg.track_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def tau_at(cfg: RefConfig, step: int) -> float:
    """Cosine EMA schedule tau_base -> tau_end over the run."""
    progress = min(1.0, step / max(1, cfg.total_steps))
    return cfg.tau_end - (cfg.tau_end - cfg.tau_base) * (math.cos(math.pi * progress) + 1) / 2


# ---------------------------------------------------------------- the training step
class ReferenceTrainer:
    """The paper's training loop body for one track, as a plain PyTorch step."""

    def __init__(self, cfg: RefConfig, device: str | torch.device = "cpu"):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.device = torch.device(device)
        self.encoder = Encoder(cfg).to(self.device)
        self.target_encoder = copy.deepcopy(self.encoder)
        for p in self.target_encoder.parameters():
            p.requires_grad_(False)
        self.predictor = Predictor(cfg).to(self.device)
        # proj_B: trainable residual injection in B, a frozen dummy in A (parameter parity)
        self.proj_b = None
        if cfg.track in ("A", "B"):
            self.proj_b = nn.Linear(cfg.exp_dim, cfg.hidden_dim).to(self.device)
            self.proj_b.requires_grad_(cfg.track == "B")
        self.has_memory = cfg.track in ("B", "C")
        if self.has_memory:
            self.exp_encoder = ExperienceEncoder(cfg).to(self.device)
            self.aggregator = AttentionAggregator(cfg).to(self.device)
            self.detector = BoundaryDetector(cfg)
            self.buffer = ExperienceBuffer(cfg)
        self.lora = LoRAModulator(cfg).to(self.device) if cfg.track == "C" else None
        params = [p for m in self._trainable_modules() for p in m.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.track_lr, weight_decay=cfg.weight_decay
        )  # one group
        self.step = 0
        self.boundaries = 0

    def _trainable_modules(self) -> list[nn.Module]:
        mods: list[nn.Module] = [self.encoder, self.predictor]
        if self.proj_b is not None:
            mods.append(self.proj_b)
        if self.has_memory:
            mods += [self.exp_encoder, self.aggregator]
        if self.lora is not None:
            mods.append(self.lora)
        return mods

    def train(self, mode: bool = True) -> None:
        for m in self._trainable_modules():
            m.train(mode)

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.optimizer.param_groups[0]["params"])

    def prefill(self, n: int, seed: int = 0) -> None:
        """Push n random latent pairs (e.g. to measure the steady state of a full buffer)."""
        if not self.has_memory:
            return
        g = torch.Generator().manual_seed(seed)
        for _ in range(n):
            pair = torch.randn(2, self.cfg.latent_dim, generator=g).to(self.device)
            self.buffer.push(pair[0], pair[1])

    @torch.no_grad()
    def prime_detector(self, frames: torch.Tensor, spread: float = 0.1) -> None:
        """Put the detector past its warmup with mu = this batch's surprisal and sigma =
        `spread` * mu, so boundaries are as rare as in a run's steady state rather than firing
        on most of the first steps (each boundary costs two extra encoder passes here)."""
        if not self.has_memory:
            return
        x = frames.to(self.device)
        z_t = self.encoder(x[:, 0].float() / 255.0)
        z_targets = [self.target_encoder(x[:, k].float() / 255.0) for k in self.cfg.horizons]
        z_base = self.predictor(z_t)
        s = float(
            torch.norm(torch.cat(z_targets) - z_base.repeat(len(z_targets), 1), dim=-1)
            .mean()
            .item()
        )
        self.detector.mu_s, self.detector.var_s = s, (spread * s) ** 2
        self.detector._steps = self.detector.warmup

    def aggregate(self, z_t: torch.Tensor) -> torch.Tensor:
        """e_agg (B, EXP_DIM): zeros when the buffer is empty (Delta W = 0, track A's path)."""
        if len(self.buffer) == 0:
            return torch.zeros(z_t.shape[0], self.cfg.exp_dim, device=self.device)
        e = self.exp_encoder(self.buffer.as_pairs().to(self.device))  # (N, EXP_DIM)
        return self.aggregator(z_t, e)

    def predict(self, z_t: torch.Tensor, e_agg: torch.Tensor | None) -> torch.Tensor:
        p = self.predictor
        if self.cfg.track == "A":
            return p(z_t)  # proj_B is carried but its output discarded
        if self.cfg.track == "B":
            h1 = p.act(p.fc1(z_t)) + self.proj_b(e_agg)
            return p.norm(p.fc2(h1))
        return self.lora(p, z_t, e_agg)

    def train_step(self, frames: torch.Tensor) -> dict:
        """One step on a batch of sequences. frames: uint8 (B, 21, 1, 64, 64)."""
        cfg = self.cfg
        x = frames.to(self.device)  # (B, 21, 1, 64, 64) uint8

        def frame(k: int) -> torch.Tensor:  # (B, 1, 64, 64) float in [0, 1], frames used only
            return x[:, k].float() / 255.0

        lr = lr_at(cfg, self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        # 1. forward: online encoder on frame 0, EMA targets on frames 5, 10, 20
        z_t = self.encoder(frame(0))  # (B, D)
        with torch.no_grad():
            z_targets = [self.target_encoder(frame(k)) for k in cfg.horizons]
        e_agg = self.aggregate(z_t) if self.has_memory else None
        z_pred = self.predict(z_t, e_agg)

        # 2. loss
        loss, lp, lreg = compute_loss(z_pred, z_targets, cfg.gamma, cfg.lambda_reg)

        # 3. backward and step
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

        # 4. EMA target update, one parameter at a time
        tau = tau_at(cfg, self.step)
        with torch.no_grad():
            pairs = zip(self.target_encoder.parameters(), self.encoder.parameters(), strict=True)
            for p_t, p in pairs:
                p_t.data.mul_(tau).add_((1.0 - tau) * p.data)

        # 5. memory: surprisal of the BASE predictor, boundary (host sync), push (z19, z20)
        boundary = False
        if self.has_memory:
            with torch.no_grad():
                z_base = self.predictor(z_t.detach())  # (B, D), no modulation
                k = len(z_targets)
                boundary = self.detector.update(torch.cat(z_targets), z_base.repeat(k, 1))
                if boundary:
                    z_prev = self.encoder(frame(-2)).mean(0)  # z_19
                    z_curr = self.encoder(frame(-1)).mean(0)  # z_20
                    self.buffer.push(z_prev, z_curr)
                    self.boundaries += 1
        self.step += 1
        return {"loss": loss, "pred": lp, "reg": lreg, "boundary": boundary}


def random_sequences(n: int, seq_len: int = 21, seed: int = 0) -> np.ndarray:
    """Random uint8 frames (n, seq_len, 1, 64, 64): the right shape when no dataset is at hand."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, seq_len, 1, 64, 64), dtype=np.uint8)


class SequenceSampler:
    """i.i.d. batches of whole sequences from an in-memory (N, 21, 1, 64, 64) uint8 array."""

    def __init__(self, frames: np.ndarray, batch_size: int, seed: int = 0):
        self.frames = frames
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)

    def next(self) -> torch.Tensor:
        idx = self.rng.integers(0, len(self.frames), size=self.batch_size)
        return torch.from_numpy(self.frames[idx])


if __name__ == "__main__":  # quick look: python -m benchmarks.paper_reference
    import time

    data = random_sequences(256)
    for track in TRACKS:
        trainer = ReferenceTrainer(RefConfig(track=track))
        trainer.prefill(trainer.cfg.buffer_capacity)
        sampler = SequenceSampler(data, trainer.cfg.batch_size)
        trainer.prime_detector(sampler.next())
        for _ in range(3):
            trainer.train_step(sampler.next())
        t0, n = time.perf_counter(), 10
        for _ in range(n):
            trainer.train_step(sampler.next())
        dt = time.perf_counter() - t0
        print(f"track {track}: {n / dt:.1f} steps/s, {trainer.n_trainable():,} trainable params")
