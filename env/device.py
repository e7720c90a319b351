"""The scenes' per-frame work on a torch device: the physics step and the renderer as tensors.

A :class:`DeviceScenes` mirrors a :class:`~env.core.SceneBatch`'s per-frame state (positions,
velocities, sprites, each scene's physics) as tensors on a device and advances and renders it
there with the numpy world's arithmetic in its order (:func:`env.physics.physics_step`,
:func:`env.core.render_frames`): on the CPU its frames equal the numpy world's bit for bit. The
numpy ``SceneBatch`` stays the control plane (episode draws, physics parameters, state dicts);
the host writes to the device only when scenes are redrawn (:meth:`DeviceScenes.load`) or their
physics change (:meth:`DeviceScenes.load_physics`) and reads from it only for the state
(:meth:`DeviceScenes.save`): a step reads nothing on the host (docs/env.md, "The worlds on a
device").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from env.core import SceneBatch


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a tensor on ``device``; to a GPU through pinned memory, not waiting for it
    (the caching host allocator keeps the pinned block until the copy is done)."""
    t = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class DeviceScenes:
    """The per-frame state of ``scenes`` on ``device``, stepped and rendered there.

    Attributes:
        positions: (N, D, 2) float64 top-left corners, x then y, px.
        velocities: (N, D, 2) float64, px/frame.
        sprites: (N, D, 28, 28) uint8.
        acceleration, restitution, friction: (N, 2), (N,), (N,) float64, each scene's physics.
    """

    def __init__(self, scenes: SceneBatch, device: torch.device | str) -> None:
        self.scenes = scenes
        self.device = torch.device(device)
        n, d, size = scenes.num_scenes, scenes.n_digits, scenes.sprites.shape[-1]
        f64 = {"dtype": torch.float64, "device": self.device}
        self.positions = torch.zeros((n, d, 2), **f64)
        self.velocities = torch.zeros((n, d, 2), **f64)
        self.sprites = torch.zeros((n, d, size, size), dtype=torch.uint8, device=self.device)
        self.acceleration = torch.zeros((n, 2), **f64)
        self.restitution = torch.ones(n, **f64)
        self.friction = torch.zeros(n, **f64)
        # Render indices: scene n's pixel (y + i, x + j) for the sprite's (i, j).
        self._scene = torch.arange(n, device=self.device)[:, None, None]
        self._offsets = torch.arange(size, device=self.device)
        self.load()
        self.load_physics()

    # ------------------------------------------------------------------ host -> device

    def load(self, indices: np.ndarray | None = None) -> None:
        """Copy the host's positions, velocities and sprites of scenes ``indices`` (all when
        None) to the device: after the host redrew them or set its state."""
        names = ("positions", "velocities", "sprites")
        if indices is None:
            for name in names:
                getattr(self, name).copy_(to_device(getattr(self.scenes, name), self.device))
            return
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return
        at = to_device(indices, self.device)
        for name in names:
            rows = to_device(getattr(self.scenes, name)[indices], self.device)
            getattr(self, name).index_copy_(0, at, rows)

    def load_physics(self) -> None:
        """Copy every scene's physics from the host (after any change of it)."""
        for name in ("acceleration", "restitution", "friction"):
            getattr(self, name).copy_(to_device(getattr(self.scenes.physics, name), self.device))

    # ------------------------------------------------------------------ device -> host

    def save(self) -> None:
        """Copy positions and velocities back into the host's scenes (a read of the device:
        for state dicts and infos that need host arrays, never per step)."""
        self.scenes.positions[:] = self.positions.cpu().numpy()
        self.scenes.velocities[:] = self.velocities.cpu().numpy()

    # ------------------------------------------------------------------ per frame

    def step(self) -> None:
        """Advance every scene one frame (:func:`env.physics.physics_step`, on the device; its
        wall test, which skips the bounce, is here arithmetic that changes nothing unbounced)."""
        physics, limit = self.scenes.physics, float(self.scenes.limit)
        p, v = self.positions, self.velocities
        if physics.any_friction:  # host flags, set when the physics changes
            v.mul_((1.0 - self.friction)[:, None, None])
        if physics.any_gravity:
            v.add_(self.acceleration[:, None, :])
        p.add_(v)
        low, high = p < 0.0, p > limit
        torch.where(low, -p, p, out=p)
        torch.where(high, 2.0 * limit - p, p, out=p)
        bounced = low | high
        torch.where(bounced, -v, v, out=v)
        if not physics.all_elastic:
            torch.where(bounced, v * self.restitution[:, None, None], v, out=v)
        p.clamp_(0.0, limit)  # a very fast digit mirrored past the other wall

    def render(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """(N, 1, canvas, canvas) uint8 frames of the current state, on the device
        (:func:`env.core.render_frames`); ``out`` a buffer of that shape to render into."""
        s = self.scenes
        n, size = s.num_scenes, s.canvas_size
        if out is None:
            out = torch.zeros((n, 1, size, size), dtype=torch.uint8, device=self.device)
        else:
            if out.shape != (n, 1, size, size) or out.dtype != torch.uint8:
                raise ValueError(f"out must be uint8 with shape {(n, 1, size, size)}")
            out.zero_()
        canvas = out[:, 0]
        corners = torch.round(self.positions).clamp_(0, s.limit).long()  # (N, D, 2) half to even
        for slot in range(s.n_digits):
            rows = corners[:, slot, 1, None] + self._offsets  # (N, S)
            cols = corners[:, slot, 0, None] + self._offsets
            at = (self._scene, rows[:, :, None], cols[:, None, :])
            sprite = self.sprites[:, slot]
            canvas[at] = sprite if slot == 0 else torch.maximum(canvas[at], sprite)
        return out

    def infos(self) -> dict[str, Any]:
        """Positions and velocities for a step's infos: device copies, no host read."""
        return {"positions": self.positions.clone(), "velocities": self.velocities.clone()}
