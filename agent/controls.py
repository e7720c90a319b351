"""Weight-freeze controls shared by ``Learner`` and ``MultiLearner``.

The class using this mixin holds ``cfg`` (an ``AgentConfig``), ``step`` (updates done) and
``_manual_freeze`` (set by ``freeze_weights``).
"""

from __future__ import annotations

from agent.config import AgentConfig


class FreezeControls:
    """``freeze_weights`` / ``unfreeze_weights`` and the config's ``freeze_*_at`` steps."""

    cfg: AgentConfig
    step: int
    _manual_freeze: bool

    @property
    def weights_frozen(self) -> bool:
        """True when this step will not change weights (manual or ``freeze_weights_at``)."""
        return self._manual_freeze or self._frozen_at(self.cfg.freeze_weights_at)

    def freeze_weights(self) -> None:
        """Stop weight and EMA updates; detector and buffer stay live (``memory`` mode)."""
        self._manual_freeze = True

    def unfreeze_weights(self) -> None:
        """Undo ``freeze_weights`` (``freeze_weights_at`` still applies)."""
        self._manual_freeze = False

    def _frozen_at(self, at: int | None) -> bool:
        return at is not None and self.step >= at
