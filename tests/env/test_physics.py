"""Physics invariants of the batched core (env.physics / env.core)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import env
from env.core import SceneBatch
from env.physics import (
    PHYSICS_FEATURES,
    PhysicsArrays,
    PhysicsParams,
    direction_vector,
    physics_features,
    physics_step,
)


def _rollout(world: SceneBatch, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities (steps + 1, N, D, 2) including the initial state."""
    pos, vel = [world.positions.copy()], [world.velocities.copy()]
    for _ in range(steps):
        world.step()
        pos.append(world.positions.copy())
        vel.append(world.velocities.copy())
    return np.stack(pos), np.stack(vel)


def _world(digits, n=32, **physics) -> SceneBatch:
    world = SceneBatch(n, digits, physics=PhysicsParams(**physics))
    rng = np.random.default_rng(1)
    world.reset_scenes(np.arange(n), [rng] * n)
    return world


def test_initial_state_ranges(digits):
    world = _world(digits, n=500)
    assert world.positions.min() >= 0 and world.positions.max() <= 36
    speed = np.linalg.norm(world.velocities, axis=-1)
    assert speed.min() >= 2.0 - 1e-12 and speed.max() <= 4.0 + 1e-12
    angle = np.arctan2(world.velocities[..., 1], world.velocities[..., 0])
    assert (angle < 0).any() and (angle > 0).any()  # all directions, not just one quadrant
    assert np.isin(world.digit_ids, digits.pool("train")).all()
    np.testing.assert_array_equal(world.sprites, digits.images[world.digit_ids])


def test_speed_constant_without_gravity_and_friction(digits):
    world = _world(digits)
    _, vel = _rollout(world, 200)
    speed = np.linalg.norm(vel, axis=-1)  # (T, N, D)
    np.testing.assert_allclose(speed, np.broadcast_to(speed[0], speed.shape), rtol=0, atol=1e-12)
    # ...and the walls really were hit (the check is not vacuous)
    flips = np.sign(vel[1:]) != np.sign(vel[:-1])
    assert flips.sum() > 50


def test_vertical_velocity_grows_by_g_between_bounces(digits):
    g = 0.5
    world = _world(digits, gravity=g)
    pos, vel = _rollout(world, 100)  # (T+1, N, D, 2)
    # Semi-implicit Euler: without a bounce p_t = p_{t-1} + v_t; a bounce mirrors p_t instead.
    free = np.abs((pos[1:] - pos[:-1]) - vel[1:]) < 1e-9  # (T, N, D, 2)
    dvy = vel[1:, ..., 1] - vel[:-1, ..., 1]
    dvx = vel[1:, ..., 0] - vel[:-1, ..., 0]
    assert free[..., 1].mean() > 0.8 and (~free[..., 1]).sum() > 10  # both cases occur
    np.testing.assert_allclose(dvy[free[..., 1]], g, rtol=0, atol=1e-12)
    assert np.all(dvx[free[..., 0]] == 0.0)  # gravity straight down has no x component
    # on a bounce frame the y velocity is the accelerated velocity flipped (restitution 1)
    bounce = ~free[..., 1]
    np.testing.assert_allclose(vel[1:, ..., 1][bounce], -(vel[:-1, ..., 1][bounce] + g), atol=1e-12)


def test_exact_gravity_increment_free_flight():
    """One digit in the middle of the box, gravity down: vy_{t+1} - vy_t == g exactly."""
    params = PhysicsParams(gravity=0.25)
    pos = np.array([[[18.0, 2.0]]])
    vel = np.array([[[0.0, 0.0]]])
    vys = []
    for _ in range(15):  # falls 0.25 * 15 * 16 / 2 = 30 px: no bounce yet
        physics_step(pos, vel, PhysicsArrays(1, params), 36)
        vys.append(vel[0, 0, 1])
    assert np.all(np.diff(vys) == 0.25)
    assert pos[0, 0, 0] == 18.0  # x untouched: cos(90 deg) is exactly 0 here
    assert pos[0, 0, 1] == pytest.approx(2.0 + 0.25 * 15 * 16 / 2)


@pytest.mark.parametrize(
    "physics",
    [
        {},
        {"gravity": 0.5},
        {"gravity": 3.0, "gravity_direction": 45.0},
        {"gravity": 50.0, "restitution": 1.5},  # absurd, still on the canvas
        {"restitution": 0.3, "friction": 0.1, "gravity": 1.0, "gravity_direction": 270.0},
    ],
)
def test_digits_never_leave_the_canvas(digits, physics):
    world = _world(digits, **physics)
    pos, _ = _rollout(world, 300)
    assert pos.min() >= 0.0 and pos.max() <= 36.0
    frames = world.render()
    assert frames.shape == (32, 1, 64, 64)


def test_wall_reflection_mirrors_and_scales():
    arrays = PhysicsArrays(1, PhysicsParams(restitution=0.5))
    pos = np.array([[[1.0, 33.0]]])
    vel = np.array([[[-3.0, 2.0]]])
    physics_step(pos, vel, arrays, 36)
    np.testing.assert_array_equal(pos, [[[2.0, 35.0]]])  # x: 1 - 3 = -2 -> mirrored to 2
    np.testing.assert_array_equal(vel, [[[1.5, 2.0]]])  # flipped and scaled by restitution
    physics_step(pos, vel, arrays, 36)
    np.testing.assert_array_equal(pos, [[[3.5, 35.0]]])  # y: 35 + 2 = 37 -> 35
    np.testing.assert_array_equal(vel, [[[1.5, -1.0]]])


def test_friction_damps_velocity():
    arrays = PhysicsArrays(1, PhysicsParams(friction=0.1))
    pos = np.array([[[10.0, 10.0]]])
    vel = np.array([[[2.0, 0.0]]])
    physics_step(pos, vel, arrays, 36)
    assert vel[0, 0, 0] == pytest.approx(1.8)
    assert pos[0, 0, 0] == pytest.approx(11.8)


def test_direction_vector_exact_quadrants():
    assert direction_vector(0) == (1.0, 0.0)
    assert direction_vector(90) == (0.0, 1.0)
    assert direction_vector(180) == (-1.0, 0.0)
    assert direction_vector(270) == (0.0, -1.0)
    assert direction_vector(-90) == (0.0, -1.0)
    ux, uy = direction_vector(30)
    assert (ux, uy) == pytest.approx((math.sqrt(3) / 2, 0.5))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gravity", float("nan")),
        ("gravity", float("inf")),
        ("gravity", "heavy"),
        ("gravity_direction", float("-inf")),
        ("restitution", -0.1),
        ("friction", 1.0),
        ("friction", -0.01),
    ],
)
def test_bad_physics_values_name_the_parameter(field, value):
    with pytest.raises(ValueError, match=field) as info:
        PhysicsParams(**{field: value})
    assert repr(value) in str(info.value) or str(value) in str(info.value)


def test_unknown_physics_name():
    with pytest.raises(ValueError, match="wind.*3"):
        PhysicsParams().replace(wind=3)


def test_physics_arrays_update_is_all_or_nothing():
    arrays = PhysicsArrays(3, PhysicsParams())
    with pytest.raises(ValueError, match="friction"):
        arrays.update(np.array([True, True, False]), gravity=1.0, friction=2.0)
    assert np.all(arrays.gravity == 0.0)
    arrays.update(np.array([False, True, False]), gravity=1.0)
    np.testing.assert_array_equal(arrays.gravity, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(arrays.acceleration, [[0, 0], [0, 1.0], [0, 0]])
    assert arrays.get(1) == PhysicsParams(gravity=1.0)


def test_public_names():
    assert env.PhysicsParams is PhysicsParams
    assert env.PHYSICS_FIELDS == ("gravity", "gravity_direction", "restitution", "friction")


def test_physics_features():
    f = physics_features(PhysicsParams(gravity=0.5, restitution=0.8, friction=0.1))
    assert f.dtype == np.float64 and f.shape == (4,)
    np.testing.assert_array_equal(f, [0.0, 0.5, 0.8, 0.1])
    np.testing.assert_array_equal(physics_features(PhysicsParams(0.2, 270.0)), [0.0, -0.2, 1, 0])
    f = physics_features(PhysicsParams(gravity=0.4, gravity_direction=30.0))
    assert (f[0], f[1]) == pytest.approx((0.4 * math.sqrt(3) / 2, 0.2))
    worlds = [PhysicsParams(0.3, d, 0.9, 0.05) for d in (0.0, 45.0, 200.0)] + [PhysicsParams()]
    arrays = PhysicsArrays(4, PhysicsParams())
    for i, w in enumerate(worlds):
        arrays.update(np.arange(4) == i, **w.as_dict())
    feats = arrays.features()
    assert feats.dtype == np.float64 and feats.shape == (4, 4)
    for i, w in enumerate(worlds):
        np.testing.assert_array_equal(feats[i], physics_features(w))  # bit-exact
    assert PHYSICS_FEATURES == ("gravity_x", "gravity_y", "restitution", "friction")
    assert env.PHYSICS_FEATURES is PHYSICS_FEATURES and env.physics_features is physics_features


def test_physics_arrays_assign_equals_update():
    worlds = [PhysicsParams(0.3, d, 0.9, 0.05) for d in (10.0, 135.0, 270.0)]
    assigned = PhysicsArrays(5, PhysicsParams())
    assigned.assign(np.array([4, 0, 2]), worlds)
    updated = PhysicsArrays(5, PhysicsParams())
    for i, w in zip((4, 0, 2), worlds, strict=True):
        updated.update(np.arange(5) == i, **w.as_dict())
    for name in ("gravity", "gravity_direction", "restitution", "friction", "acceleration"):
        np.testing.assert_array_equal(getattr(assigned, name), getattr(updated, name))
    assert assigned.any_gravity and assigned.any_friction and not assigned.all_elastic
    assert assigned.get(1) == PhysicsParams() and assigned.get(0) == worlds[1]
    with pytest.raises(ValueError, match="worlds must hold 2"):
        assigned.assign(np.array([0, 1]), worlds)
