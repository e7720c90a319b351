"""Encoder and Predictor, as the paper's listings (sizes from the config, not globals), the
predictor of residual blocks (``BlockPredictor``, below), and the per-sample weight deltas the
modulators add to a layer (``low_rank``, ``mixed``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from agent.config import AgentConfig

# oneDNN's fused convolution + pointwise op (what torch.compile's CPU backend emits for conv +
# ReLU): used for the encoder's passes without gradient on a CPU where torch has it.
_FUSED = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")


class Encoder(nn.Module):
    """Frame -> latent: four strided convs (k4 s2 p1, ReLU), Linear, LayerNorm (listing 1).

    With the paper's channels (16, 32, 64, 64) and latent 64: 172,656 parameters.
    """

    def __init__(self, latent_dim: int, channels: tuple[int, ...] = (16, 32, 64, 64)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 1
        for c_out in channels:
            conv = nn.Conv2d(c_in, c_out, kernel_size=4, stride=2, padding=1)
            layers += [conv, nn.ReLU(inplace=True)]
            c_in = c_out
        self.conv = nn.Sequential(*layers)
        side = 64 >> len(channels)  # the feature map's side: 4 after the listing's four convs
        self.proj = nn.Linear(c_in * side * side, latent_dim)
        self.norm = nn.LayerNorm(latent_dim)
        # channels_last (NHWC) convolutions: oneDNN's fast layout on CPU (the 1-channel first
        # conv is ~7x faster than in NCHW) and the tensor-core layout on GPU. Same values, same
        # parameter count and state dict; only the strides of the conv weights differ.
        self.conv.to(memory_format=torch.channels_last)
        # Run stacked under vmap (agent.seeds sets it): plain kernels, neither the layout hint
        # nor the fused oneDNN call, which have no vmap rule.
        self.batched = False

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Encoder:
        return cls(cfg.latent_dim, cfg.encoder_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 1, 64, 64) float frames -> (N, latent_dim): the listing's
        ``norm(proj(conv(x).flatten(1)))``, the convolutions on a channels_last copy of x and the
        flatten before ``proj`` in NCHW order (``.contiguous()``)."""
        if self.batched:
            h = self.conv(x)
        elif x.device.type == "cpu" and not torch.is_grad_enabled() and _FUSED:
            h = self._fused_convs(x)
        else:
            h = self.conv(x.contiguous(memory_format=torch.channels_last))
        return self.norm(self.proj(h.contiguous().flatten(1)))

    def _fused_convs(self, x: torch.Tensor) -> torch.Tensor:
        """``self.conv(x)`` without gradient on a CPU, each convolution and its ReLU one oneDNN
        call (the ReLU as the convolution's post-op, as torch.compile's CPU backend fuses them):
        the same values, bit for bit, ~1.8x faster in bf16. Under autocast in its dtype."""
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype
        h = x.to(dtype).contiguous(memory_format=torch.channels_last)
        for conv in self.conv[::2]:  # (Conv2d, ReLU) pairs
            h = torch.ops.mkldnn._convolution_pointwise(
                h, conv.weight.to(dtype), None if conv.bias is None else conv.bias.to(dtype),
                list(conv.padding), list(conv.stride), list(conv.dilation), conv.groups,
                "relu", [None], "",
            )  # fmt: skip
        return h


class Predictor(nn.Module):
    """Latent(s) -> predicted future latent(s): fc1, GELU, fc2, LayerNorm (listing 2).

    The paper's predictor reads one latent and gives one (``in_dim = out_dim = latent``).
    Beyond the paper it may read the C context latents concatenated (``in_dim = C * latent``)
    and give one latent per horizon (``heads = K``: fc2 is K latents wide and the LayerNorm acts
    on each). ``hidden`` and ``readout`` split the forward at the hidden state so the
    modulators can act there; ``finish`` is the LayerNorm after fc2. ``forward`` is exactly the
    listing's ``norm(fc2(act(fc1(z))))`` in the paper's shapes.
    """

    def __init__(self, latent_dim: int, hidden_dim: int, context: int = 1, heads: int = 1) -> None:
        super().__init__()
        self.latent_dim, self.heads = latent_dim, heads
        self.in_dim, self.out_dim = context * latent_dim, heads * latent_dim
        self.fc1 = nn.Linear(self.in_dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, self.out_dim)
        self.norm = nn.LayerNorm(latent_dim)

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Predictor:
        return cls(cfg.latent_dim, cfg.hidden_dim, cfg.context_frames, cfg.out_heads)

    def hidden(self, z: torch.Tensor) -> torch.Tensor:
        """(B, in_dim) -> (B, hidden): act(fc1(z))."""
        return self.act(self.fc1(z))

    def finish(self, y: torch.Tensor) -> torch.Tensor:
        """fc2's output (B, out_dim) -> the prediction: norm(y), (B, latent); per horizon
        (B, K, latent), each normalised."""
        return self.norm(y if self.heads == 1 else y.unflatten(-1, (self.heads, self.latent_dim)))

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """(B, hidden) -> the prediction: finish(fc2(h))."""
        return self.finish(self.fc2(h))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, in_dim) -> (B, latent) (or (B, K, latent)), the base (unmodulated) prediction."""
        return self.readout(self.hidden(z))


def build_predictor(cfg: AgentConfig) -> AnyPredictor:
    """The config's predictor: ``BlockPredictor`` with ``predictor_blocks`` > 0, else
    ``Predictor`` (the listing's)."""
    return BlockPredictor.from_config(cfg) if cfg.predictor_blocks else Predictor.from_config(cfg)


# -- the predictor of residual blocks --------------------------------------------------------
# So that a modulation can act in every block, not once (docs/agent.md, "a predictor with room
# to use the world"; docs/results.md, "A world model that uses what it is told"):
#
#     h = inp(z);  h = h + block_i(h) for i < N;  pred = norm(z_last + out(h))  per horizon
#
# the output a change of the newest context latent ("no change" is out = 0). A modulator runs
# each block itself (``run_block``; the per-block modulators: ``agent.modulators.blocks``).


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


class InkDecoder(nn.Module):
    """latent (N, D) -> logits of the frame's ink at half its side (N, 32 * 32): a two-hidden-layer
    MLP (the probes' pixel decoder's shape), trained with the encoder where ``recon_weight`` > 0
    so that the latent keeps where things are (``agent.step.recon_loss``)."""

    def __init__(self, latent_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.GELU(), nn.Linear(hidden, 32 * 32))  # fmt: skip

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


#: Either predictor (the listing's, or of residual blocks).
AnyPredictor = Predictor | BlockPredictor


# -- the per-sample weight deltas a modulator adds to a layer (tracks C and E) ----------------
def low_rank(
    x: torch.Tensor, v: torch.Tensor, delta: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """x (B, n) through U diag(delta_b) V^T per sample: ((x V) * delta) U^T."""
    return (x @ v) * delta @ u.T


def mixed(x: torch.Tensor, c: torch.Tensor, bases: torch.Tensor) -> torch.Tensor:
    """x (B, n) through sum_j c_bj H_j per sample, bases (m * n, out) the H_j stacked:
    (c_b (x) x_b) @ bases (never materialising (B, out, n))."""
    return (c.unsqueeze(2) * x.unsqueeze(1)).flatten(1) @ bases
