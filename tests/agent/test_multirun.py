"""MultiLearner: R stacked runs == R single Learners (fp32, CPU), checkpoints, no host sync.

Bit-exactness is not expected: under vmap the R runs' convolutions run as one grouped
convolution and the linears as batched matmuls, whose float summation order differs from the
single learner's kernels (forward and backward agree to ~1e-7 relative). AdamW, the EMA, the
detector and the buffer are the same elementwise kernels on stacked tensors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from agent import AgentConfig, DatasetSource, Learner, StepMetrics, load_checkpoint
from agent import save_checkpoint as save
from agent.multirun import MultiLearner, stack_batches
from agent.sources import Batch

RTOL, ATOL = 1e-5, 1e-6


def configs(track: str, n: int = 3, **over) -> list[AgentConfig]:
    # Small buffer and a sensitive detector: the buffer fills and wraps within a few steps.
    base = dict(kappa=0.3, detector_warmup=2, buffer_capacity=4, total_steps=20)
    base.update(over)
    return [AgentConfig.from_preset("tiny", track=track, seed=10 + i, **base) for i in range(n)]


def batch_stream(cfgs: list[AgentConfig], frames: np.ndarray, n: int) -> list[list[Batch]]:
    """n steps of R per-run batches (each run its own DatasetSource); some invalid samples."""
    srcs = [DatasetSource(frames, c, seed=100 + i) for i, c in enumerate(cfgs)]
    out = []
    for t in range(n):
        step = [s.next() for s in srcs]
        if t % 4 == 3:  # a step with invalid samples (and, in run 0, none valid at all)
            for i, b in enumerate(step):
                b.valid[: 3 + i] = False
                if i == 0:
                    b.valid[:] = False
        for b in step:
            b.world[: t % 3] = 1
        out.append(step)
    return out


def assert_run_matches(ml: MultiLearner, i: int, single: Learner, strict_params: bool) -> None:
    """Run i of ``ml`` against ``single``: every weight and AdamW moment within rtol 1e-5 /
    atol 1e-6 (``strict_params``; else 1e-3 / 1e-5), except where the gradient is float noise.

    The exception is AdamW's: its update is ~lr * g / sqrt(v), so an element whose true gradient
    is 0 (the attention's key bias: softmax ignores a shift of every score; a conv weight feeding
    a dead ReLU) moves by up to ~lr per step on the noise of g, differently in each learner.
    Those elements (second moment v < 1e-12 in the single learner, |g| below ~1e-6) are only
    checked against that bound. Every metric agrees to 1e-5 regardless."""
    sd = ml.state_dict_for(i)
    ref = single.state_dict()
    rtol, atol = (RTOL, ATOL) if strict_params else (1e-3, 1e-5)
    noise: dict[str, torch.Tensor] = {}
    for j, name in enumerate(ml.trainable_names):
        if j in ref["optimizer"]["state"]:
            noise[name] = ref["optimizer"]["state"][j]["exp_avg_sq"] < 1e-12
    for name in list(noise):
        if name.startswith("encoder."):  # the EMA target follows the encoder
            noise["target.target." + name[len("encoder.") :]] = noise[name]
    bound = 2 * max(c.lr for c in ml.configs) * ml.step

    def close(a: torch.Tensor, b: torch.Tensor, what: str, mask: torch.Tensor | None) -> None:
        if mask is not None:
            torch.testing.assert_close(a[mask], b[mask], rtol=0, atol=bound, msg=what)
            a, b = a[~mask], b[~mask]
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=what)

    for name, p in ref["nets"].items():
        close(sd["nets"][name], p, name, noise.get(name))
    for j, st in ref["optimizer"]["state"].items():
        mine, mask = sd["optimizer"]["state"][j], noise.get(ml.trainable_names[j])
        assert torch.equal(mine["step"], st["step"])
        close(mine["exp_avg"], st["exp_avg"], f"exp_avg {j}", mask)
        torch.testing.assert_close(mine["exp_avg_sq"], st["exp_avg_sq"], rtol=1e-4, atol=1e-12)
    for name in ("count", "mu", "var", "threshold"):
        torch.testing.assert_close(sd["detector"][name], ref["detector"][name], rtol=RTOL, atol=0)
    for name in ("world", "steps", "ptr", "size"):
        assert torch.equal(sd["buffer"][name], ref["buffer"][name]), name
    torch.testing.assert_close(sd["buffer"]["pairs"], ref["buffer"]["pairs"], rtol=RTOL, atol=ATOL)
    assert sd["step"] == ref["step"]


def run_both(
    cfgs: list[AgentConfig], frames: np.ndarray, n: int, strict: bool = True
) -> tuple[MultiLearner, list[Learner], np.ndarray]:
    """Train a MultiLearner and R single Learners on the same batches; compare every step."""
    ml, singles = MultiLearner(cfgs), [Learner(c) for c in cfgs]
    boundaries = np.zeros((n, len(cfgs)))
    rtol, atol = (RTOL, ATOL) if strict else (1e-4, 1e-5)
    for t, step in enumerate(batch_stream(cfgs, frames, n)):
        mm = ml.update(stack_batches(step))
        assert all(v.shape == (len(cfgs),) for v in mm)
        for i, (learner, b) in enumerate(zip(singles, step, strict=True)):
            ms = learner.update(b)
            for name, x, y in zip(StepMetrics.NAMES, mm, ms, strict=True):
                torch.testing.assert_close(
                    x[i], y, rtol=rtol, atol=atol, equal_nan=True, msg=f"step {t} run {i} {name}"
                )
        boundaries[t] = mm.boundary.numpy()
    assert ml.step == n
    return ml, singles, boundaries


@pytest.mark.parametrize("track", ["A", "C"])
def test_stacked_runs_match_single_learners(track: str, frames: np.ndarray) -> None:
    cfgs = configs(track)
    ml, singles, fired = run_both(cfgs, frames, 10)
    # The detector fired and stayed quiet, and every buffer filled and wrapped.
    assert 0 < fired.sum() < fired.size
    assert (ml.buffer.size == 4).all() and fired.sum(0).min() > 4
    for i, learner in enumerate(singles):
        assert_run_matches(ml, i, learner, strict_params=True)


def test_scalar_hyperparameters_may_differ(frames: np.ndarray) -> None:
    """Different lr / weight decay / schedules / loss weights / detector settings per run."""
    base = configs("C", 1)[0]
    cfgs = [
        base,
        base.replace(seed=3, lr=1e-3, weight_decay=0.0, gamma=0.5, lambda_reg=0.2, kappa=0.5),
        base.replace(seed=4, warmup_frac=0.2, total_steps=30, tau_base=0.99, detector_warmup=4),
    ]
    ml, singles, _ = run_both(cfgs, frames, 8)
    assert len(ml._adam_groups) == 3 and len(ml._ema_groups) == 2
    for i, learner in enumerate(singles):
        assert_run_matches(ml, i, learner, strict_params=True)


@pytest.mark.parametrize("track", ["B", "D", "E"])
def test_other_tracks_match_closely(track: str, frames: np.ndarray) -> None:
    """B, D, E: metrics agree to 1e-4. A few parameters with near-zero gradients (proj_B, FiLM,
    hyper bases) move by AdamW's sign-like first steps, so float noise in their gradients
    shows up in the weights at up to 1e-2 relative; the metrics do not feel it."""
    cfgs = configs(track, 2)
    ml, singles, _ = run_both(cfgs, frames, 6, strict=False)
    for i, learner in enumerate(singles):
        assert_run_matches(ml, i, learner, strict_params=False)


def test_unstack_checkpoint_and_resume_as_single(tmp_path: Path, frames: np.ndarray) -> None:
    cfgs = configs("C", 2)
    stream = batch_stream(cfgs, frames, 10)
    ml = MultiLearner(cfgs)
    for step in stream[:5]:
        ml.update(stack_batches(step))
    path = save(tmp_path / "run1.pt", ml.unstack(1), extra={"run": 1})
    learner = Learner(cfgs[1].replace(seed=999))  # weights come from the checkpoint
    assert load_checkpoint(path, learner) == {"run": 1}
    assert learner.step == 5
    for step in stream[5:]:
        mm = ml.update(stack_batches(step))
        ms = learner.update(step[1])
        for name, x, y in zip(StepMetrics.NAMES, mm, ms, strict=True):
            torch.testing.assert_close(x[1], y, rtol=RTOL, atol=ATOL, equal_nan=True, msg=name)
    assert_run_matches(ml, 1, learner, strict_params=True)


def test_from_learners_continues_each_run(frames: np.ndarray) -> None:
    cfgs = configs("C", 2)
    stream = batch_stream(cfgs, frames, 8)
    singles = [Learner(c) for c in cfgs]
    for step in stream[:4]:
        for learner, b in zip(singles, step, strict=True):
            learner.update(b)
    ml = MultiLearner.from_learners(singles)
    assert ml.step == 4
    for i, learner in enumerate(singles):  # stacking is an exact copy
        assert_run_matches(ml, i, learner, strict_params=True)
        sd = ml.state_dict_for(i)
        for name, p in learner.state_dict()["nets"].items():
            assert torch.equal(sd["nets"][name], p)
    for step in stream[4:]:
        ml.update(stack_batches(step))
        for learner, b in zip(singles, step, strict=True):
            learner.update(b)
    for i, learner in enumerate(singles):
        assert_run_matches(ml, i, learner, strict_params=True)


def test_fresh_multilearner_starts_as_fresh_learners() -> None:
    cfgs = configs("C", 2)
    ml = MultiLearner(cfgs)
    for i, cfg in enumerate(cfgs):
        ref = Learner(cfg).state_dict()
        sd = ml.state_dict_for(i)
        assert sd["optimizer"]["state"] == {}
        assert sd["optimizer"]["param_groups"] == ref["optimizer"]["param_groups"]
        for name, p in ref["nets"].items():
            assert torch.equal(sd["nets"][name], p)


@pytest.mark.parametrize("track", ["A", "C"])
def test_update_never_reads_a_tensor_on_the_host(
    track: str, frames: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As tests/agent/test_learner.py: no .item()/bool()/float()/tolist() inside update()."""
    cfgs = configs(track, 2, detector_warmup=0)
    ml = MultiLearner(cfgs)
    stream = [stack_batches(s) for s in batch_stream(cfgs, frames, 4)]
    ml.update(stream[0])

    def forbidden(*args, **kwargs):
        raise AssertionError("host read of a tensor inside update()")

    for name in ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    for b in stream[1:]:
        ml.update(b)
    monkeypatch.undo()
    assert ml.step == 4


def test_freeze_weights_keeps_memory_live(frames: np.ndarray) -> None:
    cfgs = configs("C", 2)
    ml = MultiLearner(cfgs)
    stream = [stack_batches(s) for s in batch_stream(cfgs, frames, 4)]
    ml.update(stream[0])
    ml.freeze_weights()
    before = {n: p.detach().clone() for n, p in ml.params.items()}
    for b in stream[1:3]:
        m = ml.update(b)
    assert all(torch.equal(before[n], p) for n, p in ml.params.items())
    assert (ml.detector.count == 3).all() and m.buffer_size.sum() > 0
    ml.unfreeze_weights()
    ml.update(stream[3])
    assert not torch.equal(before["encoder.proj.weight"], ml.params["encoder.proj.weight"])


def test_bf16_runs(frames: np.ndarray) -> None:
    cfgs = configs("C", 2, precision="bf16")
    ml = MultiLearner(cfgs)
    for step in batch_stream(cfgs, frames, 2):
        m = ml.update(step)  # a list of Batches is stacked on the fly
    assert torch.isfinite(m.loss_total).all()
    assert all(p.dtype == torch.float32 for p in ml.params.values())


def test_invalid_stacks_are_refused() -> None:
    c = configs("C", 1)[0]
    with pytest.raises(ValueError, match="track"):
        MultiLearner([c, AgentConfig.from_preset("tiny", track="A")])
    with pytest.raises(ValueError, match="hidden_dim"):
        MultiLearner([c, c.replace(hidden_dim=32)])
    with pytest.raises(ValueError, match="cuda_graph"):
        MultiLearner([c], cuda_graph=True)
    ml = MultiLearner([c, c.replace(seed=1)])
    with pytest.raises(ValueError, match="leading dimension"):
        ml.update(
            Batch(
                torch.zeros(3, 8, 5, 1, 64, 64, dtype=torch.uint8),
                torch.ones(3, 8, dtype=torch.bool),
                torch.zeros(3, 8, dtype=torch.long),
            )
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs / compile need a GPU")
@pytest.mark.parametrize("mode", ["graph", "compile"])
def test_cuda_paths_match_eager(mode: str, frames: np.ndarray) -> None:
    cfgs = configs("C", 3)
    kw = {"cuda_graph": True} if mode == "graph" else {"compile": True}
    eager, fast = MultiLearner(cfgs, "cuda"), MultiLearner(cfgs, "cuda", **kw)
    for step in batch_stream(cfgs, frames, 8):
        b = stack_batches(step).to("cuda")
        me, mf = eager.update(b), fast.update(b)
        for name, x, y in zip(StepMetrics.NAMES, mf, me, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, equal_nan=True, msg=name)
    for i in range(len(cfgs)):
        a, b = fast.state_dict_for(i), eager.state_dict_for(i)
        for name, p in b["nets"].items():
            torch.testing.assert_close(a["nets"][name], p, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.parametrize("push_pair", ["newest", "input"])
def test_stacked_runs_match_with_context_frames_and_per_horizon_outputs(push_pair: str) -> None:
    long = np.random.default_rng(1).integers(0, 256, size=(24, 24, 1, 64, 64), dtype=np.uint8)
    cfgs = configs("C", context_frames=3, per_horizon=True, push_pair=push_pair)
    ml, singles, fired = run_both(cfgs, long, 8)  # every metric of every step to 1e-5
    assert 0 < fired.sum() < fired.size
    for i, learner in enumerate(singles):  # weights: float noise of ~3e-7 through AdamW
        assert_run_matches(ml, i, learner, strict_params=False)
