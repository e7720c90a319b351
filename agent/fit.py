"""One fit update on the reservoir: ``fit_update(model, draw, lr)`` (settle, then fit).

After the settle (``cfg.settle``) the encoder and its EMA target are fixed and a step no longer
learns from its own batch: it keeps the batch's windows in the reservoir (``agent.reservoir``) and
makes ``cfg.fit_updates`` of these updates on minibatches drawn from all of it. The predictor,
the modulator and the memory pathway (experience encoder, aggregator; the oracle's context)
learn; the encoder gets no gradient (its latents are stored). The loss is the prediction error
alone: the variance hinge keeps the encoder from collapsing, and a fixed encoder cannot.
"""

from __future__ import annotations

import torch

from agent.objective import per_horizon
from agent.reservoir import Draw
from agent.step import Model, memory_codes, modulated_prediction


def fit_update(m: Model, draw: Draw, lr: float | torch.Tensor) -> torch.Tensor:
    """One AdamW update of the predictor, modulator and memory pathway on ``draw`` at ``lr``;
    returns the minibatch's prediction error (0-dim, detached), the MSE over horizons and
    dimensions, as the step's ``pred`` loss."""
    nets, spec = m.nets, m.spec
    codes = memory_codes(nets, draw.memory, spec)
    with spec.autocast():
        mod, _ = modulated_prediction(nets, draw.ctx, draw.memory, spec, draw.physics, codes)
    loss = (per_horizon(mod.pred.float()) - draw.target).pow(2).mean()
    for group in m.optimizer.param_groups:
        group["lr"] = lr
    m.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    m.optimizer.step()
    return loss.detach()
