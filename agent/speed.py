"""Which of the GPU's paths a learner runs: ``Speed``. ``Speed()``, the default, is the plain
step (``agent.step.jepa_step``) everywhere.

On a CPU the plain step is the path: of the speed layers once built around it, only the stream
latent cache (``cfg.stream_cache``, ``agent.latent_cache``, part of the step) paid on the
default run (docs/throughput.md, "The step's layers, and what each buys"). On a GPU the step
can be replayed from CUDA graphs and compiled; the GPU issue chooses between them by
measurement.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Speed:
    """The GPU paths of a learner's update."""

    # The whole update replayed from CUDA graphs on a GPU (``agent.capture``; eager with the
    # same tensor inputs elsewhere); needs stream_cache=false.
    captured: bool = False
    # The step through ``torch.compile`` (its backend fuses the step's kernels; captured, the
    # compiled code is what the graph records); needs stream_cache=false. For a GPU: compiling
    # takes tens of seconds, and on a CPU it does not pay.
    compiled: bool = False
