"""The feed of a run: the ``agent`` batch source of its protocol, with the protocol's switch.

A feed is an ``agent.StreamSource`` or ``agent.DatasetSource`` (``next() -> Batch``, its
``state_dict`` in the checkpoint) that also has ``enter(physics, shifted)`` (a switch: the
physics from the next step on, the samples tagged ``shifted``), ``vec_env`` (the live env,
None for stored sequences), ``held`` (every stream held in one world by ``enter``) and
``stream_physics()`` (each stream's own world; None where one physics acts on every stream). The
protocol's ``feed(cfg, device, store)`` builds the run's:

- ``ScheduledStreams`` (worlds protocol): every stream's episodes in worlds drawn from a family
  (``env.WorldSchedule``); ``enter`` holds every stream in one world;
- ``PaperStreams`` (paper protocol, ``--source stream``): a live ``env.MovingMNISTVectorEnv``
  whose physics switch mid-stream;
- ``DatasetSplits`` (paper protocol, ``--source dataset``): i.i.d. sequences of a
  ``make_dataset`` store's base or shift split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import env
from agent import DatasetSource, StreamSource
from agent.config import AgentConfig
from runners.online.store import split_frames


class PaperStreams(StreamSource):
    """B parallel streams of a live vector env (``self.env``); ``enter`` switches their physics
    mid-stream."""

    @property
    def vec_env(self) -> env.MovingMNISTVectorEnv:
        return self.env

    held = False  # one physics for every stream, never held (``ScheduledStreams``)

    def enter(self, physics: env.PhysicsParams, shifted: int) -> None:
        """Every stream's physics from the next frame on; samples tagged ``shifted``."""
        self.env.set_physics(**physics.as_dict())
        self.set_shifted(shifted)

    def stream_physics(self) -> None:
        """None: every stream has the env's one physics."""


class DatasetSplits(DatasetSource):
    """I.i.d. sequences of a store's base (shifted 0) or shift (shifted 1) train split; a switch
    opens the other split as a fresh source of it would (its own seed, ``seed + shifted``)."""

    vec_env = None
    held = False

    def __init__(self, agent: AgentConfig, data: str, store: env.PaperDataset,
                 device: torch.device) -> None:
        self.agent, self.data, self.store = agent, data, store
        self._open(0, device)

    def _open(self, shifted: int, device: torch.device) -> None:
        a = self.agent
        frames = split_frames(self.store, "shift" if shifted else "base", "train", self.data)
        super().__init__(frames, a, device, shifted=shifted, seed=a.seed + shifted)

    def enter(self, physics: env.PhysicsParams, shifted: int) -> None:
        """The split of ``shifted`` (the store holds two gravities; ``paper.check_store``)."""
        if shifted != self.shifted:
            self._open(shifted, self.device)

    def stream_physics(self) -> None:
        """None: sequences of one split, no streams with worlds of their own."""


class ScheduledStreams(StreamSource):
    """B parallel streams, each episode in a world drawn from a family (``self.env``, an
    ``env.WorldSchedule``).

    ``enter(physics, 1)`` holds every stream in ``physics`` and ends its current episode, so each
    starts its next one (new digits) in that world with an empty memory (a per-stream memory is
    emptied at an episode start). That episode never ends (an endless hold): the stream's memory
    fills with its own world's transitions from the switch on, so the stream error after the
    switch, by steps since the switch, is the frozen learner's error with a memory of that
    many entries (up to its capacity). ``enter(physics, 0)`` gives the streams back to the
    schedule.
    """

    @property
    def schedule(self) -> env.WorldSchedule:
        return self.env

    @property
    def vec_env(self) -> env.MovingMNISTVectorEnv:
        return self.env.env

    @property
    def held(self) -> bool:
        """Every stream is held in one world (``enter(physics, 1)``)."""
        return bool(self.schedule.held.any())

    def enter(self, physics: env.PhysicsParams, shifted: int) -> None:
        if shifted == 0:
            self.schedule.release()
        else:
            self.schedule.hold(physics, endless=True)
            # End every running episode at the next step; one that already ended resets then.
            running = ~np.asarray(self.done, bool)
            self.vec_env.set_episode_limits(self.vec_env.elapsed_steps + 1, mask=running)
        self.set_shifted(shifted)

    def stream_physics(self) -> list[env.PhysicsParams]:
        """Each stream's current world."""
        return [self.schedule.physics(i) for i in range(self.vec_env.num_envs)]


def make_scheduled_feed(
    n_streams: int, family: str | env.WorldFamily, episode_steps: tuple[int, int], source_cfg: Any, device: Any,
    seed: int, group_size: int = 1, residency: tuple[int, int] = (1, 1), vec_env: Any = None,
) -> ScheduledStreams:  # fmt: skip
    """The run's streams under a world schedule (groups of ``group_size`` streams sharing a
    world for ``residency`` episodes), started (the first windows full). ``vec_env``: the env
    to schedule (a block of a shared env, ``env.blocks``: not started then, as its blocks start
    together, ``StreamSource.start_together``); None: a new one of ``n_streams``."""
    own = vec_env is None
    if own:
        vec_env = env.MovingMNISTVectorEnv(n_streams, max_episode_steps=None,
                                           device=world_device(device))  # fmt: skip
    schedule = env.WorldSchedule(vec_env, family, episode_steps=episode_steps, seed=seed,
                                 group_size=group_size, residency=residency)  # fmt: skip
    source = ScheduledStreams(schedule, source_cfg, device, seed=seed)
    if own:
        source.start()
    return source


Feed = PaperStreams | DatasetSplits | ScheduledStreams


def world_device(device: Any) -> torch.device | None:
    """Where the streams' worlds are stepped and rendered: on a GPU the learner's own (the
    frames never pass the host: ``env.device``), elsewhere numpy on the host (faster there)."""
    device = torch.device(device)
    return device if device.type == "cuda" else None


def stagger(vec_env: env.MovingMNISTVectorEnv, episode_length: int) -> None:
    """Spread the streams' episode phases evenly over ``episode_length`` so their resets (and
    the windows a reset masks) do not all fall on the same steps. Stream i's first episode is
    shortened by ``i * L / B`` steps (through the env's documented state dict)."""
    state = vec_env.get_state()
    n = vec_env.num_envs
    offset = (np.arange(n) * episode_length) // n
    elapsed = np.asarray(state["elapsed"], np.int64)
    state["elapsed"] = np.minimum(elapsed + offset, episode_length - 1)
    vec_env.set_state(state)
