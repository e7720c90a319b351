"""Encoder and Predictor, as the paper's listings (sizes from the config, not globals)."""

from __future__ import annotations

import torch
from torch import nn

from agent.config import AgentConfig


class Encoder(nn.Module):
    """Frame -> latent: four strided convs (k4 s2 p1, ReLU), Linear, LayerNorm (listing 1).

    With the paper's channels (16, 32, 64, 64) and latent 64: 172,656 parameters.
    """

    def __init__(self, latent_dim: int, channels: tuple[int, ...] = (16, 32, 64, 64)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 1
        for c_out in channels:
            layers += [
                nn.Conv2d(c_in, c_out, kernel_size=4, stride=2, padding=1),
                nn.ReLU(inplace=True),
            ]
            c_in = c_out
        self.conv = nn.Sequential(*layers)
        self.proj = nn.Linear(c_in * 4 * 4, latent_dim)  # 64 px / 2^4 = 4x4 feature map
        self.norm = nn.LayerNorm(latent_dim)
        # channels_last (NHWC) convolutions: oneDNN's fast layout on CPU (the 1-channel first
        # conv is ~7x faster than in NCHW) and the tensor-core layout on GPU. Same values, same
        # parameter count and state dict; only the strides of the conv weights differ.
        self.conv.to(memory_format=torch.channels_last)

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Encoder:
        return cls(cfg.latent_dim, cfg.encoder_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, 1, 64, 64) float frames -> (N, latent_dim), convolutions in channels_last."""
        return self.encode(x, channels_last=True)

    def encode(self, x: torch.Tensor, channels_last: bool = True) -> torch.Tensor:
        """(N, 1, 64, 64) float frames -> (N, latent_dim): the listing's
        ``norm(proj(conv(x).flatten(1)))``.

        ``channels_last``: the convolutions run on a channels_last copy of x, and the flatten
        before ``proj`` is in NCHW order (``.contiguous()``). False: on x as given, which is
        what ``torch.func.vmap`` can run (it cannot express the channels_last copy: "NYI:
        querying is_contiguous inside of vmap for memory_format other than
        torch.contiguous_format", torch 2.13). Same values."""
        if channels_last:
            h = self.conv(x.contiguous(memory_format=torch.channels_last)).contiguous()
        else:
            h = self.conv(x)
        return self.norm(self.proj(h.flatten(1)))


class Predictor(nn.Module):
    """Latent -> predicted future latent: fc1, GELU, fc2, LayerNorm (listing 2).

    ``hidden`` and ``readout`` split the forward at the hidden state so the modulators can
    act there; ``forward`` is exactly the listing's ``norm(fc2(act(fc1(z))))``.
    """

    def __init__(self, latent_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(latent_dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, latent_dim)
        self.norm = nn.LayerNorm(latent_dim)

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Predictor:
        return cls(cfg.latent_dim, cfg.hidden_dim)

    def hidden(self, z: torch.Tensor) -> torch.Tensor:
        """(B, latent) -> (B, hidden): act(fc1(z))."""
        return self.act(self.fc1(z))

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """(B, hidden) -> (B, latent): norm(fc2(h))."""
        return self.norm(self.fc2(h))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, latent) -> (B, latent), the base (unmodulated) prediction."""
        return self.norm(self.fc2(self.act(self.fc1(z))))
