"""AgentConfig: paper defaults, presets, per-track defaults, JSON round trip, bad values."""

from __future__ import annotations

import json

import pytest

from agent import AgentConfig


def test_defaults_are_the_papers_tables() -> None:
    cfg = AgentConfig()
    assert (cfg.latent_dim, cfg.hidden_dim, cfg.batch_size) == (64, 1024, 64)
    assert cfg.horizons == (5, 10, 20)
    assert (cfg.weight_decay, cfg.warmup_frac, cfg.tau_base, cfg.tau_end) == (
        0.01,
        0.05,
        0.996,
        0.9999,
    )
    assert (cfg.gamma, cfg.lambda_reg, cfg.buffer_capacity) == (0.75, 0.05, 256)
    assert (cfg.detector_momentum, cfg.detector_warmup) == (0.99, 10)
    assert (cfg.exp_dim, cfg.exp_layers, cfg.exp_heads, cfg.exp_ff_dim) == (64, 2, 2, 128)
    assert cfg.lora_rank == 4 and cfg.encoder_channels == (16, 32, 64, 64)


@pytest.mark.parametrize(
    "track, lr, kappa",
    [("A", 3e-3, 1.5), ("B", 2e-3, 2.0), ("C", 3e-3, 1.5), ("D", 3e-3, 1.5), ("E", 3e-3, 1.5)],
)
def test_track_defaults(track: str, lr: float, kappa: float) -> None:
    cfg = AgentConfig.of_size("paper", track=track)
    assert (cfg.track, cfg.lr, cfg.kappa) == (track, lr, kappa)
    # Overrides win over the track's defaults.
    assert AgentConfig.of_size("paper", track=track, lr=1e-4).lr == 1e-4


def test_tiny_preset_is_small_and_json_round_trips() -> None:
    cfg = AgentConfig.of_size("tiny", track="B", lambda_reg=0.1, freeze_ema_at=5)
    assert cfg.hidden_dim < 1024 and cfg.track == "B" and cfg.lambda_reg == 0.1
    again = AgentConfig.from_dict(json.loads(cfg.to_json()))
    assert again == cfg and isinstance(again.horizons, tuple)
    assert cfg.replace(kappa=3.0).kappa == 3.0


@pytest.mark.parametrize(
    "field, value",
    [
        ("lr", -1e-3),
        ("lr", 0.0),
        ("kappa", 0.0),
        ("kappa", -1.0),
        ("track", "Z"),
        ("lora_rank", 65),
        ("lora_rank", 0),
        ("precision", "fp16"),
        ("batch_size", 1),
        ("horizons", (10, 5)),
        ("horizons", ()),
        ("exp_heads", 3),
        ("tau_end", 0.9),
        ("warmup_frac", 1.0),
        ("detector_momentum", 1.0),
        ("weight_decay", -0.1),
        ("gamma", -0.5),
        ("lambda_reg", -1.0),
        ("regularise", "targets"),
        ("pred_error", "l1"),
        ("buffer_capacity", 0),
        ("freeze_ema_at", -1),
        ("encoder_channels", (16, 32)),
        ("hidden_dim", 2.5),
        ("total_steps", 0),
        ("lr", float("nan")),
    ],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field}"):
        AgentConfig.of_size("paper", **{field: value})
    with pytest.raises(ValueError, match=f"^{field}"):
        AgentConfig(**{field: value})


def test_unknown_field_preset_and_track() -> None:
    with pytest.raises(ValueError, match="^learning_rate: unknown config field"):
        AgentConfig.of_size("paper", learning_rate=1.0)
    with pytest.raises(ValueError, match="^size"):
        AgentConfig.of_size("huge")
    with pytest.raises(ValueError, match="^track"):
        AgentConfig.of_size("paper", track="F")
    with pytest.raises(ValueError, match="^lora_rank"):
        AgentConfig(latent_dim=8, hidden_dim=64, exp_dim=8, lora_rank=9, hyper_dim=2)


def test_preferred_precision_is_bf16_exactly_where_bf16_kernels_run(monkeypatch) -> None:
    """bf16 where torch's own check finds native bf16 kernels, fp32 everywhere else."""
    import torch

    import agent.config
    from agent import preferred_precision

    native = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert preferred_precision("cpu") == ("bf16" if native else "fp32")
    assert preferred_precision("meta") == "fp32"
    cuda = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert preferred_precision("cuda") == ("bf16" if cuda else "fp32")
    # It follows bf16_unsupported both ways, whatever this machine has.
    monkeypatch.setattr(agent.config, "bf16_unsupported", lambda device="cpu": None)
    assert preferred_precision("cpu") == "bf16"
    monkeypatch.setattr(agent.config, "bf16_unsupported", lambda device="cpu": "no kernels")
    assert preferred_precision("cpu") == "fp32"


def test_a_removed_option_is_an_unknown_field() -> None:
    """A config naming an option that no longer exists is one ValueError naming it (a run of an
    earlier version is refused by its version first: ``check_version``)."""
    from agent.config import check_version

    cfg = AgentConfig.of_size("tiny")
    with pytest.raises(ValueError, match="^code_cache: unknown config field"):
        AgentConfig.from_dict({**cfg.to_dict(), "code_cache": False})
    check_version(2, "x")
    for found, said in ((None, "a version before 2"), (1, "version 1"), (3, "version 3")):
        with pytest.raises(ValueError, match=f"^the run was written by {said} of this project, "
                           "this is version 2: use it with the code of its version$"):
            check_version(found, "the run")
