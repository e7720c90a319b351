"""EntryCodes: each world-memory entry's e_i computed once (``cfg.code_cache``).

A world memory holds W x cap entries (8 x 256 at the paper preset's capacity) and the plain step
runs the experience encoder on every entry some sample reads, at every step, forward and
backward: eight times the paper's one buffer, and the step's slowest part. Yet an entry changes
only when it is written (with writes at every step by the S streams of a world, a slot is
rewritten every cap / S steps).

``EntryCodes`` keeps the e_i of each slot with the step stamp of the entry it encoded
(``WorldBuffer.steps``). At each step the experience encoder runs only on the entries read now
that it has not encoded yet (those written since: S per world and step), with gradient; the
others' e_i come from the store, computed when they were first read (at most cap / S steps ago,
by weights that have moved since) and without gradient. With still weights (the memory phase
after a freeze) the e_i are the ones the plain step computes. The store goes into the learner's
checkpoint, so a resumed run continues exactly as an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import torch


class EntryCodes:
    """The e_i (W * cap, exp_dim) of a world memory's entries by slot, and the step stamp of
    the entry each was computed from (-1: none)."""

    def __init__(self) -> None:
        self.codes: torch.Tensor | None = None
        self.stamp: torch.Tensor | None = None

    def read(
        self,
        experience: torch.nn.Module,
        pairs: torch.Tensor,
        steps: torch.Tensor,
        shown: torch.Tensor,
        exp_dim: int,
    ) -> torch.Tensor:
        """e_i (W, cap, exp_dim) of ``pairs`` (W, cap, E, D) written at ``steps`` (W, cap), on
        the slots ``shown`` (W, cap) (the others hold whatever they held: no sample reads them).
        New entries go through ``experience`` under the caller's grad mode; the rest are held
        (detached). The count of new entries is a host read."""
        n = steps.numel()
        fits = self.codes is not None and self.codes.shape == (n, exp_dim)
        if not (fits and self.codes.device == pairs.device):  # (a resume on another device)
            self.codes = pairs.new_zeros(n, exp_dim)
            self.stamp = torch.full((n,), -1, dtype=torch.long, device=steps.device)
        stamps = steps.flatten()
        new = shown.flatten() & (stamps != self.stamp)
        idx = new.nonzero().squeeze(1)  # (M,): a host read
        e_new = experience(pairs.flatten(0, 1).index_select(0, idx))  # (M, d)
        e = self.codes.index_copy(0, idx, e_new.to(self.codes.dtype))  # a new tensor
        self.codes, self.stamp = e.detach(), torch.where(new, stamps, self.stamp)
        return e.view(*steps.shape, -1)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"codes": self.codes, "stamp": self.stamp}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore (``None``: a checkpoint written without the store: every entry re-encoded)."""
        state = state or {}
        self.codes, self.stamp = state.get("codes"), state.get("stamp")
