"""Sources turn uint8 frames into training ``Batch``es: a live vector env or a stored dataset.

Both give ``Batch.frames`` (B, F, 1, 64, 64) uint8: the frames at the window positions
``cfg.frame_offsets`` (0 = the window's oldest frame). In the paper's layout (0, 5, 10, 20, 19):
index 0 the predictor input, 1..K the targets, K+1 the frame before the newest (index K). With
context frames or the input's own memory pair, the P past frames come first (the last of them
the input), then the K targets (``AgentConfig.frame_offsets``). A stream's consecutive batches
share frames: ``LatentCache`` (below) keeps their latents by stream time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agent.config import PHYSICS_DIM, AgentConfig
from env.device import to_device


def read_frames(frames: Any, rows: slice | np.ndarray, cols: np.ndarray) -> np.ndarray:
    """frames[rows][:, cols] for numpy or zarr (orthogonal read) -> (n, len(cols), 1, 64, 64)."""
    if isinstance(frames, np.ndarray):
        return np.ascontiguousarray(frames[rows][:, cols])
    if isinstance(rows, np.ndarray):
        uniq, inverse = np.unique(rows, return_inverse=True)
        return np.asarray(frames.oindex[uniq, cols])[inverse]
    return np.asarray(frames.oindex[rows, cols])


@dataclass
class Batch:
    """One update's samples."""

    frames: torch.Tensor  # (B, F, 1, 64, 64) uint8 at ``cfg.frame_offsets``
    valid: torch.Tensor  # (B,) bool; False: the stream's window spans an episode reset
    shifted: torch.Tensor  # (B,) int64; 1 where the sample's physics is switched from the base
    # (B, PHYSICS_DIM) float32: the true physics of each sample's world (gravity_x, gravity_y,
    # restitution, friction; the oracle's input), None where the source does not know it.
    physics: torch.Tensor | None = None
    # The stream source's frame counter at the newest frame (consecutive batches: +1, the same
    # streams one frame on), which lets the learner reuse latents of shared frames
    # (``agent.sources``); None for i.i.d. batches.
    clock: int | None = None
    # (B,) int64: a key of each sample's episode, unique over streams and episodes (the peer
    # read of ``memory_scope="group"`` masks a sample's own episode); None for i.i.d. batches.
    episode: torch.Tensor | None = None
    # (B,) int64: the id of each sample's world (``env.WorldSchedule``'s ``world_id``; two
    # samples share it only in the same world); None where the source has no such ids.
    world_key: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> Batch:
        """The batch with its tensors on ``device``."""
        return Batch(**{k: v.to(device) if isinstance(v, torch.Tensor) else v
                        for k, v in vars(self).items()})  # fmt: skip


class DatasetSource:
    """I.i.d. batches of stored sequences (the paper's protocol): one sample per sequence,
    the window at the sequence's start (the paper: input frame 0, targets at the horizons (5, 10,
    20), pair (19, 20)).

    frames: (N, T, 1, 64, 64) uint8, a numpy array or anything with zarr's ``oindex``. Only the
    frames at the window positions are used, and from a store they are read into memory once, at
    construction: F frames per sequence (the paper's base train split, 8,000 sequences x 5
    frames: 164 MB, about 3 s), where reading each batch's sequences from the store would
    decompress a whole chunk per drawn sequence at every step. Sampling with replacement from
    ``np.random.default_rng(seed)``. ``physics``: the store's world as PHYSICS_DIM numbers
    (``env.physics_features``), given to every sample as ``Batch.physics`` (None: unknown).
    """

    def __init__(
        self, frames: Any, cfg: AgentConfig, device: torch.device | str = "cpu", shifted: int = 0,
        seed: int = 0, physics: Any = None,
    ) -> None:  # fmt: skip
        if frames.ndim != 5 or tuple(frames.shape[2:]) != (1, 64, 64):
            raise ValueError(f"frames: expected (N, T, 1, 64, 64), got {tuple(frames.shape)}")
        if frames.shape[1] < cfg.window:
            raise ValueError(
                f"frames: sequences of {frames.shape[1]} frames are shorter than a sample's "
                f"window of {cfg.window} (context, input and max(horizons))"
            )
        self.batch_size = cfg.batch_size
        self.offsets = np.asarray(cfg.frame_offsets)
        # (N, F, 1, 64, 64): each sequence's frames at the window positions, in memory.
        self.frames = read_frames(frames, slice(None), self.offsets)
        self.device = torch.device(device)
        self.shifted = int(shifted)
        self.rng = np.random.default_rng(seed)
        self.physics = None
        if physics is not None:
            self.physics = torch.as_tensor(physics, dtype=torch.float32).reshape(PHYSICS_DIM)

    def next(self) -> Batch:
        """Draw one batch of B sequences."""
        idx = self.rng.integers(0, self.frames.shape[0], size=self.batch_size)
        x = self.frames[idx]  # (B, F, 1, 64, 64), a contiguous copy
        b = self.batch_size
        return Batch(
            torch.from_numpy(x).to(self.device),
            torch.ones(b, dtype=torch.bool, device=self.device),
            torch.full((b,), self.shifted, dtype=torch.long, device=self.device),
            None if self.physics is None else self.physics.to(self.device).expand(b, -1),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "shifted": self.shifted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.shifted = int(state["shifted"])


class StreamSource:
    """Live frames from a vector env (NEXT_STEP autoreset), one env step per ``next()``: the last
    W = ``cfg.window`` frames of each stream with the episode each came from, a sample valid only
    where its whole window lies in one episode (docs/agent.md, "Stream samples", which says why
    the memory pair must be the input's own, ``push_pair="input"``). ``shifted`` (num_envs,)
    int64, each stream's shift tag: set by ``set_shifted``, or, with ``base_gravity``, 1 wherever
    ``infos["gravity"]`` differs.

    An env whose worlds live on a torch device (its ``device`` attribute, e.g.
    ``MovingMNISTVectorEnv(device="cuda")``) returns its frames there; the windows are kept and
    cut there too, and a step copies only the per-stream tags from the host, through pinned
    memory without waiting: no frame passes the host.
    """

    def __init__(
        self, vec_env: Any, cfg: AgentConfig, device: torch.device | str = "cpu",
        seed: int | None = None, base_gravity: float | None = None,
    ) -> None:  # fmt: skip
        if cfg.push_pair != "input":
            raise ValueError(
                "push_pair: a stream source needs the input's own memory pair (push_pair "
                "'input'); the paper's 'newest' pair holds frames after the sample's input"
            )
        self.env = vec_env
        self.num_envs = int(vec_env.num_envs)
        self.window = cfg.window
        self.offsets = np.asarray(cfg.frame_offsets)
        self.device = torch.device(device)
        self.seed = seed
        self.base_gravity = base_gravity
        space = vec_env.action_space
        self._action = np.zeros(space.shape, dtype=space.dtype)  # Moving MNIST ignores actions
        n, w = self.num_envs, self.window
        self.frames: Any = np.zeros((n, w, 1, 64, 64), np.uint8)  # ring, slot head-1 newest
        self.world_device: torch.device | None = getattr(vec_env, "device", None)
        if self.world_device is not None:  # the ring on the worlds' device, and its orders
            self.frames = torch.zeros((n, w, 1, 64, 64), dtype=torch.uint8,
                                      device=self.world_device)  # fmt: skip
            at = np.arange(w)[:, None] + self.offsets[None]  # head -> window order
            self._orders = torch.as_tensor(at % w, device=self.world_device)
        self.episode = np.full((n, w), -1, np.int64)  # episode id of each window frame
        self.head = 0
        self.episode_id = np.zeros(n, np.int64)
        self.done = np.zeros(n, bool)  # last step ended the episode: next frame starts anew
        self.shifted = np.zeros(n, np.int64)
        self.physics = np.zeros((n, PHYSICS_DIM), np.float32)  # infos["physics"] of the newest
        self.world_key = np.full(n, -1, np.int64)  # infos["world_id"] of the newest frame
        self.started = False
        self.t = 0  # env steps taken

    def set_shifted(self, shifted: int, mask: np.ndarray | None = None) -> None:
        """Tag the streams (all, or those in ``mask``) ``shifted`` (0 or 1) from now on."""
        self.shifted[slice(None) if mask is None else np.asarray(mask, bool)] = shifted

    def _push(self, obs: Any) -> None:
        if self.world_device is None:
            obs = np.asarray(obs, np.uint8).reshape(self.num_envs, 1, 64, 64)
        self.frames[:, self.head] = obs
        self.episode[:, self.head] = self.episode_id
        self.head = (self.head + 1) % self.window

    def _tag(self, infos: Any) -> None:
        if not isinstance(infos, dict):
            return
        if "physics" in infos:
            self.physics = np.asarray(infos["physics"], np.float32).copy()
        if "world_id" in infos:
            self.world_key = np.asarray(infos["world_id"], np.int64).copy()
        if self.base_gravity is not None and "gravity" in infos:
            self.shifted = (np.asarray(infos["gravity"]) != self.base_gravity).astype(np.int64)

    def _step(self) -> None:
        obs, _, terminated, truncated, infos = self.env.step(self._action)
        self.episode_id = self.episode_id + self.done  # these streams were just reset
        self.done = np.logical_or(terminated, truncated)
        self._tag(infos)
        self._push(obs)
        self.t += 1

    def start(self) -> None:
        """Reset the env and fill the windows (W-1 env steps after the reset)."""
        StreamSource.start_together([self])

    @staticmethod
    def start_together(sources: list[StreamSource]) -> None:
        """Start several sources in lockstep: every env reset, then each source's W-2 filling
        steps taken in turn, one a source (envs that step together, ``env.blocks``, need it)."""
        for src in sources:
            obs, infos = src.env.reset(seed=src.seed)
            src._tag(infos)
            src._push(obs)
        for _ in range(max(src.window for src in sources) - 2):
            for src in sources:
                src._step()
        for src in sources:
            src.started = True

    def next(self) -> Batch:
        """Advance every stream one frame; return the windows ending at the new frame."""
        if not self.started:
            self.start()
        self._step()
        if self.world_device is None:
            order = (self.head + self.offsets) % self.window  # oldest slot is head
            x = torch.from_numpy(self.frames[:, order])  # (B, F, 1, 64, 64)
        else:
            x = self.frames.index_select(1, self._orders[self.head])
        ep = self.episode  # (B, W)
        valid = (ep == ep[:, :1]).all(axis=1) & (ep[:, 0] >= 0)
        newest = ep[:, (self.head - 1) % self.window]
        episode = newest * self.num_envs + np.arange(self.num_envs)  # unique per stream, episode
        dev = self.device
        return Batch(x.to(dev), to_device(valid, dev), to_device(self.shifted.copy(), dev),
                     to_device(self.physics.copy(), dev), clock=self.t,
                     episode=to_device(episode, dev),
                     world_key=to_device(self.world_key.copy(), dev))  # fmt: skip

    #: The state beside the windows and the env's: per-stream arrays and counters.
    _STATE = ("episode", "head", "episode_id", "done", "shifted", "physics", "world_key",
              "started", "t")  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Windows, episode ids, counters and the env's own state (bit-exact continuation)."""
        frames = self.frames  # a copy either way: the state must not follow the live windows
        frames = frames.copy() if self.world_device is None else frames.to("cpu", copy=True).numpy()
        state = {k: copy.copy(getattr(self, k)) for k in self._STATE}  # arrays: copies
        return {"frames": frames, **state, "env": self.env.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        frames = np.array(state["frames"], np.uint8)
        on_host = self.world_device is None
        self.frames = frames if on_host else torch.from_numpy(frames).to(self.world_device)
        for k in self._STATE:  # each as the type it has here (arrays: their dtype)
            now = getattr(self, k)
            setattr(self, k, np.array(state[k], now.dtype) if isinstance(now, np.ndarray)
                    else type(now)(state[k]))  # fmt: skip
        self.env.set_state(state["env"])


# -- the stream latent cache ------------------------------------------------------------------
# LatentCache (``cfg.stream_cache``; docs/agent.md, "Stream batches share frames"): a stream frame
# is encoded once per encoder and its latent kept by stream time (``Batch.clock``); a frame it does
# not hold is encoded exactly, nothing is read without a clock, and its state is checkpointed.


class LatentCache:
    """Latents of recent stream frames by stream time (the newest frame at ``cfg.window`` - 1)."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.window = cfg.window
        p, k = cfg.past_frames, cfg.n_horizons
        self.target_index = tuple(range(p, p + k))  # the targets' columns in Batch.frames
        self.target_offsets = tuple(cfg.frame_offsets[p : p + k])
        self.input_offset = cfg.input_position
        self.target: dict[int, torch.Tensor] = {}  # stream time -> (B, D) EMA latent
        self.online: dict[int, torch.Tensor] = {}  # stream time -> (B, D) online input latent
        self.t: int | None = None  # clock of the last batch

    def time_of(self, t: int, offset: int) -> int:
        """Stream time of the frame at window position ``offset`` in the batch of clock t."""
        return t - (self.window - 1 - offset)

    def begin(self, t: int) -> None:
        """A new batch at clock t: drop what no later batch needs; everything on a gap."""
        gap = self.t is None or t != self.t + 1
        oldest = self.time_of(t, 0)
        for store in (self.target, self.online):
            for s in [s for s in store if gap or s < oldest]:
                del store[s]
        self.t = t

    def targets(
        self, t: int, x: torch.Tensor, encode: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """(B, K, D) EMA-target latents of the batch x (B, F, 1, 64, 64) at clock t: the cached
        ones, the others encoded now (``encode``: (N, 1, 64, 64) -> (N, D), the EMA encoder
        under the learner's precision, no gradient) and kept."""
        times = [self.time_of(t, o) for o in self.target_offsets]
        missing = [j for j, s in enumerate(times) if s not in self.target]
        if missing:
            cols = [self.target_index[j] for j in missing]
            # slices, not a list index (which would travel host -> device: a GPU sync)
            x_cols = torch.cat([x[:, c : c + 1] for c in cols], 1)
            z = encode(x_cols.flatten(0, 1)).view(x.shape[0], len(cols), -1)
            for i, j in enumerate(missing):
                self.target[times[j]] = z[:, i]
        return torch.stack([self.target[s] for s in times], 1)

    def earlier(self, t: int, context: int, k: int) -> torch.Tensor | None:
        """The online latents (B, k, D) of the k frames before this batch's C = ``context``
        context frames (earlier steps' inputs), if all are held."""
        first = self.time_of(t, self.input_offset) - context - k + 1
        held = [self.online.get(s) for s in range(first, first + k)]
        return None if any(z is None for z in held) else torch.stack(held, 1)

    def keep_input(self, t: int, z: torch.Tensor) -> None:
        """Keep this batch's input latent z (B, D) (detached) for the next step's pair."""
        self.online[self.time_of(t, self.input_offset)] = z.detach()

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "target": dict(self.target), "online": dict(self.online)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.t = None if state["t"] is None else int(state["t"])
        self.target = {int(s): z for s, z in state["target"].items()}
        self.online = {int(s): z for s, z in state["online"].items()}
