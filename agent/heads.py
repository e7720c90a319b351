"""One latent, every head: predictors that fit beside a settled learner's own, on its reservoir.

Until the settle (``cfg.settle``) one encoder and its EMA target learn with the learner's own
predictor (its track's). From the settle on the encoder is fixed, and every head named by
``cfg.heads`` (a track's letter, or ``"oracle"``: the true physics in place of memory) fits on
the same reservoir of the same latent, in the same process: each fit update draws one minibatch
and the learner's predictor, then each head, takes one AdamW step on it
(``agent.step.fit_update``). The heads differ only by how they are conditioned, and scored on
the same encoded windows and memories their differences are paired (docs/definitions.md, "One
latent, every head").

A head is a ``Learner`` of its own config (``head_config``) whose encoder, EMA target, memory
(detector and buffer), reservoir and stream latent cache are its trainer's; its optimiser holds
its own predictor, modulator and memory pathway (or oracle) alone. Where it starts
(``cfg.head_start``): ``"copy"``, at the settle its predictor and that predictor's AdamW moments
are the trainer's, and its own conditioning is zero there (every track's modulation is a linear
map of e_agg, zero at an empty memory; the oracle's last layer is zeroed), so every head
predicts what the trainer's base predictor does and what it fits after is all that differs;
``"fresh"``, its own initialisation (the same seed's: the trainer's predictor as it was at step
0).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import torch
from torch import nn

from agent import tracks
from agent.build import build_optimizer
from agent.config import AgentConfig
from agent.reservoir import Draw
from agent.step import fit_lr_at, fit_update

#: A learner with heads (``agent.learner.Learner``; not imported: the learner imports this).
Learner = Any


def head_config(cfg: AgentConfig, name: str) -> AgentConfig:
    """The config of head ``name`` of a learner of ``cfg``: the same learner with track ``name``
    (or, for ``"oracle"``, the oracle of ``tracks.ceiling_track``: the learner's own track's
    modulation where it reads memory, else track C's), and no heads of its own."""
    if name == tracks.ORACLE:
        return cfg.replace(track=tracks.ceiling_track([cfg.track]), oracle=True, heads=())
    return cfg.replace(track=name, oracle=False, heads=())


def build_heads(trainer: Learner) -> dict[str, Learner]:
    """The heads of ``trainer`` (``trainer.cfg.heads``, in order), each a learner of its class,
    sharing its encoder, EMA target, memory, reservoir and latent cache."""
    out = {}
    for name in trainer.cfg.heads:
        head = type(trainer)(head_config(trainer.cfg, name), trainer.device)
        head.nets.encoder, head.nets.target = trainer.nets.encoder, trainer.nets.target
        head.detector, head.buffer = trainer.detector, trainer.buffer
        head.reservoir, head.latents = trainer.reservoir, trainer.latents
        head.optimizer = build_optimizer(head.cfg, head.nets, encoder=False)
        out[name] = head
    return out


def fit_beside(trainer: Learner, draw: Draw) -> concurrent.futures.Future:
    """Every head's fit update on ``draw`` (``agent.step.fit_update`` at its rate, in the
    order of ``cfg.heads``), in the trainer's worker thread: it runs beside the trainer's own
    update (the tensors apart, the ops releasing the GIL; measured 18-19 ms against 24-25 ms a
    fit update of the default run's heads C, A and the oracle, one after the other, on a 2-core
    CPU). The result: the heads have updated."""
    if trainer.head_worker is None:  # its intra-op threads the caller's (not the default)
        trainer.head_worker = concurrent.futures.ThreadPoolExecutor(
            1, "heads", initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),))

    def fit() -> None:
        for head in trainer.heads.values():
            fit_update(head.model, draw, fit_lr_at(head.cfg, trainer.step))

    return trainer.head_worker.submit(fit)


def start(trainer: Learner) -> None:
    """At the settle: with ``head_start="copy"`` each head's predictor, and its AdamW moments,
    become the trainer's, and the oracle's last layer zero (its conditioning zero, as every
    track's is at an empty memory); with ``"fresh"`` nothing."""
    if trainer.cfg.head_start != "copy":
        return
    for head in trainer.heads.values():
        head.nets.predictor.load_state_dict(trainer.nets.predictor.state_dict())
        copy_moments(trainer.optimizer, trainer.nets.predictor, head.optimizer, head.nets.predictor)
        if head.nets.oracle is not None:
            last = head.nets.oracle.net[-1]
            with torch.no_grad():
                last.weight.zero_()
                last.bias.zero_()


def copy_moments(src: torch.optim.Optimizer, src_module: nn.Module, dst: torch.optim.Optimizer,
                 dst_module: nn.Module) -> None:  # fmt: skip
    """The optimiser state of ``src_module``'s parameters in ``src`` copied to the same-named
    parameters of ``dst_module`` in ``dst`` (parameters without state are left without)."""
    theirs = dict(src_module.named_parameters())
    for name, p in dst_module.named_parameters():
        state = src.state.get(theirs[name])
        if state:
            dst.state[p] = {k: v.clone() for k, v in state.items()}


#: The parts of a network a head's state holds: everything but what it shares.
SHARED = ("encoder.", "target.")


def state_dict(head: Learner) -> dict[str, Any]:
    """A head's own state: its networks but the shared encoder and target, and its optimiser."""
    nets = {k: v for k, v in head.nets.state_dict().items() if not k.startswith(SHARED)}
    return {"nets": nets, "optimizer": head.optimizer.state_dict()}


def load_state_dict(head: Learner, state: dict[str, Any]) -> None:
    """Inverse of ``state_dict`` (anything but the shared parts missing is an error)."""
    missing, unexpected = head.nets.load_state_dict(state["nets"], strict=False)
    if unexpected or any(not k.startswith(SHARED) for k in missing):
        raise ValueError(f"a head's state does not fit its networks: missing "
                         f"{[k for k in missing if not k.startswith(SHARED)]}, unexpected {unexpected}")
    head.optimizer.load_state_dict(state["optimizer"])
