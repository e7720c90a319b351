"""Networks and modulators: the listings' sizes, and exact identity at e_agg = 0."""

from __future__ import annotations

import pytest
import torch
from fp32 import assert_reordered

from agent import AgentConfig
from agent.build import build_networks, count_parameters
from agent.modulators import LoRAModulator
from agent.networks import Encoder, Predictor


def test_encoder_matches_the_listing() -> None:
    enc = Encoder(64)
    assert sum(p.numel() for p in enc.parameters()) == 172_656  # "~172k"
    assert enc(torch.rand(3, 1, 64, 64)).shape == (3, 64)


def test_channels_last_encoder_computes_the_listings_forward() -> None:
    """The convs run in channels_last (speed); the values are the NCHW listing's."""
    torch.manual_seed(0)
    enc = Encoder(64)
    assert enc.conv[2].weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.rand(5, 1, 64, 64) * 255
    h = x
    for m in enc.conv:  # the listing, in plain NCHW
        h = torch.nn.functional.conv2d(h, m.weight.contiguous(), m.bias, 2, 1) if isinstance(
            m, torch.nn.Conv2d) else torch.relu(h)
    ref = enc.norm(enc.proj(h.flatten(1)))
    # Other kernels, other summation orders: the longest sum is proj's, 64 * 4 * 4 terms.
    assert_reordered(enc(x), ref, 64 * 16, "encoder")
    sd = Encoder(64).state_dict()  # state dicts load across layouts
    enc.load_state_dict(sd)
    assert torch.equal(enc.conv[0].weight, sd["conv.0.weight"])


@pytest.mark.parametrize("track", ["C", "D", "E"])
def test_empty_buffer_modulation_equals_track_a_bit_for_bit(track: str) -> None:
    cfg_a = AgentConfig.of_size("tiny", track="A")
    cfg_x = AgentConfig.of_size("tiny", track=track)
    a, x = build_networks(cfg_a), build_networks(cfg_x)
    # Same seed, same build order: same encoder and predictor.
    assert torch.equal(a.predictor.fc1.weight, x.predictor.fc1.weight)
    z = torch.randn(7, cfg_a.latent_dim)
    e_agg = torch.zeros(7, cfg_a.exp_dim)
    out_a = a.modulator(a.predictor, z, e_agg).pred
    out_x = x.modulator(x.predictor, z, e_agg).pred
    assert torch.equal(out_a, out_x)
    # ... and a non-zero experience does change the output.
    assert not torch.equal(out_a, x.modulator(x.predictor, z, torch.ones(7, cfg_a.exp_dim)).pred)


def test_lora_equals_explicit_effective_weights() -> None:
    torch.manual_seed(0)
    pred, mod = Predictor(8, 32), LoRAModulator(8, 32, 6, 3)
    z, e = torch.randn(5, 8), torch.randn(5, 6)
    out = mod(pred, z, e).pred
    d1, d2 = mod.delta1_gen(e), mod.delta2_gen(e)
    for i in range(5):
        w1 = pred.fc1.weight + mod.u1 @ torch.diag(d1[i]) @ mod.v1.T  # (32, 8)
        w2 = pred.fc2.weight + mod.u2 @ torch.diag(d2[i]) @ mod.v2.T  # (8, 32)
        h = torch.nn.functional.gelu(z[i] @ w1.T + pred.fc1.bias)
        ref = pred.norm(h @ w2.T + pred.fc2.bias)
        assert_reordered(out[i], ref, 32, "LoRA")  # sums of at most 32 terms (the hidden width)
    assert mod.delta1_gen.bias is None and mod.delta2_gen.bias is None


def test_parameter_counts_at_paper_config() -> None:
    counts = {
        t: count_parameters(build_networks(AgentConfig.of_size("paper", track=t)))
        for t in "ABCDE"
    }
    assert counts["A"] == {"trainable": 304_944, "frozen": 66_560, "ema_target": 172_656}
    assert counts["B"]["trainable"] == 450_864
    assert counts["C"]["trainable"] == 393_520  # inside the paper's 388k-438k
    assert counts["D"]["trainable"] == 515_376
    assert counts["E"]["trainable"] == 646_704


@pytest.mark.parametrize("bf16", [False, pytest.param(True, marks=pytest.mark.bf16)], ids=["fp32", "bf16"])
def test_fused_no_grad_convolutions_change_no_bit(bf16: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without gradient on a CPU the encoder runs conv + ReLU as one oneDNN call: the same
    latents, bit for bit, as the plain modules (fp32 and under bf16 autocast)."""
    import agent.networks as networks

    if not networks._FUSED:
        pytest.fail("this torch has no oneDNN fused convolution (torch.ops.mkldnn._convolution_pointwise)")
    enc = Encoder(64)
    x = torch.randint(0, 256, (6, 1, 64, 64)).float()

    def latents() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return enc(x)

    fused = latents()
    monkeypatch.setattr(networks, "_FUSED", False)
    assert torch.equal(fused, latents())


def test_the_encoder_has_four_convolutions_and_the_map_encoder_is_gone() -> None:
    """encoder_channels names the listing's four strided convolutions; the retired map encoder
    and any predictor choice (archive, "Removed options") are unknown fields."""
    with pytest.raises(ValueError, match="^encoder_channels: must be four positive integers"):
        AgentConfig.of_size("tiny", track="A", encoder_channels=(4, 8))
    cfg = AgentConfig.of_size("tiny", track="A").to_dict()
    for name, value in (("encoder", "map"), ("predictor", "direct"), ("predictor", "rollout")):
        with pytest.raises(ValueError, match=f"^{name}: unknown config field"):
            AgentConfig.from_dict({**cfg, name: value})


SEED_CONFIGS = [("A", {}), ("B", {}), ("C", {}), ("D", {}), ("E", {}), ("C", {"oracle": True})]


@pytest.mark.parametrize(("track", "kw"), SEED_CONFIGS, ids=["A", "B", "C", "D", "E", "oracle"])
def test_cfg_seed_sets_every_parts_init_and_leaves_the_global_rng_alone(
    track: str, kw: dict
) -> None:
    """build_networks draws every random weight from ``cfg.seed``: the same seed gives the same
    state dict bit for bit whatever the global RNG holds, two seeds differ in every random
    tensor of every part (only the LayerNorms' constant ones and zeros agree), and the global
    RNG comes back as it was."""
    def build(seed: int, global_seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        nets = build_networks(AgentConfig.of_size("tiny", track=track, seed=seed, **kw))
        assert torch.equal(torch.get_rng_state(), before), "build_networks moved the global RNG"
        # ... so the global stream goes on as if nothing had been built in between.
        expected = torch.Generator().manual_seed(global_seed).set_state(before)
        assert torch.equal(torch.rand(8), torch.rand(8, generator=expected))
        return nets.state_dict()

    a, a_again, b = build(1, 100), build(1, 200), build(2, 100)
    assert a.keys() == a_again.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], a_again[k]), f"{k}: the same cfg.seed gave another init"

    nets = build_networks(AgentConfig.of_size("tiny", track=track, seed=1, **kw))
    norms = [name for name, m in nets.named_modules() if isinstance(m, torch.nn.LayerNorm)]
    constant = {f"{name}.{p}" for name in norms for p in ("weight", "bias")}
    parts = {k.split(".")[0] for k in a}
    expected = {"encoder", "target", "predictor", "modulator"} | (
        {"oracle"} if kw.get("oracle") else {"experience", "aggregator"} if track != "A" else set())
    assert parts == expected
    differ = {part: 0 for part in parts}
    for k in a:
        if k in constant:  # LayerNorm affine: ones and zeros whatever the seed
            init = torch.ones_like(a[k]) if k.endswith("weight") else torch.zeros_like(a[k])
            assert torch.equal(a[k], b[k]) and torch.equal(a[k], init), k
            continue
        assert not torch.equal(a[k], b[k]), f"{k}: two seeds gave the same init"
        differ[k.split(".")[0]] += 1
    assert all(n > 0 for n in differ.values()), differ
