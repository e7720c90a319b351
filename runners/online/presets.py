"""The run presets (``--preset``): each one's whole configuration in one table.

A preset names a whole run: the learner's size (``agent.config``'s "tiny", every size shrunk,
or "paper", Tables 4-5), the learner's values on top of it under any protocol and under one
protocol (on top of the protocol's own, ``Worlds.learner``), and the schedule where it is not
``Schedule``'s defaults. The other options override it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunPreset:
    """A run preset: its learner's size and values, and its schedule."""

    size: str
    """The learner's size (``agent.AgentConfig.of_size``): "tiny" or "paper"."""
    agent: dict[str, Any] = field(default_factory=dict)
    """The learner's values on top of its size, under either protocol."""
    protocols: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The learner's values under a protocol, by its name, on top of the protocol's own."""
    schedule: dict[str, int] = field(default_factory=dict)
    """The schedule's values where they are not ``Schedule``'s defaults."""


# The default run's learner: the tiny networks with 64 streams, a lower LR and a stronger
# variance hinge, measured to beat "no change" within minutes on a 2-core CPU without collapsing
# (the tiny preset as is collapses in the stream: sigma_embed ~0.02, docs/train_online.md).
_CPU: dict[str, Any] = {"batch_size": 64, "lr": 1e-3, "lambda_reg": 0.2, "buffer_capacity": 64}

PRESETS: dict[str, RunPreset] = {
    # Under the worlds protocol the predictor is two residual blocks of 128 with the track's
    # modulation in each (``predictor_blocks``): the floor's held-out D 18% lower, the oracle's
    # margin 6% -> 11%, over seeds 0-2 (docs/results.md, "A world model that uses what it is
    # told"); it settles halfway through base training, then fits two minibatches of the
    # reservoir a step (``settle``, docs/results.md "Settle, then fit"). Its encoder learns
    # with a pixel reconstruction beside the JEPA loss and the predictor reads four context
    # frames: the oracle's margin 13.6% / 14.1% against 10.0% / 8.4% over seeds 0-2 / 42-44, in
    # every seed, every D 10-18% lower (docs/results.md, "What the latents hold").
    "cpu": RunPreset("tiny", _CPU, {"worlds": {"predictor_blocks": 2, "hidden_dim": 128,
                                               "settle": 0.5, "fit_updates": 2,
                                               "recon_weight": 3.0, "context_frames": 4}}),
    # The cpu learner fed 8x the windows a step (512 streams, 64 worlds at once) for 6,000 steps,
    # evaluated every 1,000: on one H100 with --capture, 1.5 minutes with its bounds beside, and
    # the oracle 15% below the floor (seeds 0-2) where the cpu preset's is 11% (docs/results.md,
    # "A world model that uses what it is told"). On a 2-core CPU a step takes 4.6x the cpu
    # preset's. No stream cache and no reservoir: --capture needs both off.
    "gpu": RunPreset("tiny", {**_CPU, "batch_size": 512, "stream_cache": False},
                     {"worlds": {"predictor_blocks": 2, "hidden_dim": 128}},
                     schedule={"steps": 6_000, "eval_every": 1_000}),
    # Seconds, for tests: under the worlds protocol its 8 streams form 4 worlds of 2 (8 of 8
    # would be one world); a token fit of the held-out report's pixel decoder.
    "tiny": RunPreset("tiny", protocols={"worlds": {"group_size": 2}},
                      schedule={"decoder_steps": 20}),
    # The paper's learner (Tables 4-5).
    "paper": RunPreset("paper"),
}
