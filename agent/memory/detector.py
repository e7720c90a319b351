"""BoundaryDetector: surprisal-gated event detector (the paper's listing), kept on the device.

The statistics are 0-dim tensors and the decision is a bool tensor, so a step never waits for
the device (the listing's ``.item()`` was a host sync every step).
"""

from __future__ import annotations

import torch

from agent.memory.buffer import TensorState


class BoundaryDetector(TensorState):
    """EMA mean/variance of the surprisal; fires when ``s > mu + kappa * sqrt(var)``.

    As the listing: ``mu`` starts at 0 and ``var`` at 1; each update first moves ``mu`` and
    ``var`` (var uses the old mu), counts the update, and may fire only once the count has
    reached ``warmup`` (so updates 1 .. warmup-1 never fire). Statistics are float64, like the
    listing's Python floats.

    ``streams=S``: S independent detectors (statistics (S,)) updated elementwise by one call,
    one per group memory (``memory_scope="group"``: S = the number of groups).
    """

    _STATE = ("mu", "var", "count", "threshold")
    _WHAT = "detector statistics of shape"

    def __init__(
        self, kappa: float, momentum: float = 0.99, warmup: int = 10,
        device: torch.device | str = "cpu", streams: int | None = None,
    ) -> None:  # fmt: skip
        self.kappa = float(kappa)
        self.momentum = float(momentum)
        self.warmup = int(warmup)
        self.device = torch.device(device)
        self.shape: tuple[int, ...] = () if streams is None else (int(streams),)
        self.reset()

    def reset(self) -> None:
        """Fresh statistics (mu 0, var 1, count 0)."""
        kw = {"device": self.device, "dtype": torch.float64}
        self.mu = torch.zeros(self.shape, **kw)
        self.var = torch.ones(self.shape, **kw)
        self.count = torch.zeros(self.shape, device=self.device, dtype=torch.long)
        self.threshold = self.mu + self.kappa * self.var.clamp(min=1e-8).sqrt()

    @torch.no_grad()
    def update(self, s: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Feed one surprisal value; return the boundary decision.

        s: 0-dim float tensor. active: 0-dim bool (False: this step had no valid sample, the
        statistics stay as they are and nothing fires). Returns a 0-dim bool tensor. Per
        stream: s, active and the result (S,).
        """
        s = s.detach().to(torch.float64)
        m = self.momentum
        mu = m * self.mu + (1.0 - m) * s
        var = m * self.var + (1.0 - m) * (s - self.mu) ** 2
        count = self.count + 1
        threshold = mu + self.kappa * var.clamp(min=1e-8).sqrt()
        fired = (s > threshold) & (count >= self.warmup)
        if active is not None:
            mu = torch.where(active, mu, self.mu)
            var = torch.where(active, var, self.var)
            count = torch.where(active, count, self.count)
            threshold = torch.where(active, threshold, self.threshold)
            fired = fired & active
        for name, value in zip(self._STATE, (mu, var, count, threshold), strict=True):
            getattr(self, name).copy_(value)  # in place: a captured step's state
        return fired
