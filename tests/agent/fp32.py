"""Comparing two fp32 computations that are equal in exact arithmetic."""

from __future__ import annotations

import torch

# fp32 unit roundoff. A sum of n terms evaluated in another order (a BLAS that blocks a matmul
# of other shape differently, another kernel) changes by at most gamma_n * sum|terms|, gamma_n =
# n * U / (1 - n * U) ~ n * U (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1).
U = 2.0**-24


def assert_reordered(a: torch.Tensor, b: torch.Tensor, n: int, what: str = "") -> None:
    """a and b are equal in exact arithmetic and differ only in the order of sums of at most n
    terms: |a - b| <= n * U * max(|a|, |b|). Anything that changes what is computed differs by
    orders of magnitude more."""
    a, b = a.detach().double(), b.detach().double()
    scale = max(float(a.abs().max()), float(b.abs().max())) if a.numel() else 0.0
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    assert diff <= n * U * scale, f"{what}: |a - b| = {diff:.3g} > {n} * U * {scale:.3g}"
