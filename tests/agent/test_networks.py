"""Networks and modulators: the listings' sizes, and exact identity at e_agg = 0."""

from __future__ import annotations

import pytest
import torch
from fp32 import assert_reordered

from agent import AgentConfig
from agent.build import build_networks, count_parameters
from agent.modulators import LoRAModulator
from agent.networks import ConvPredictor, Encoder, Predictor


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
    cfg_a = AgentConfig.from_preset("tiny", track="A")
    cfg_x = AgentConfig.from_preset("tiny", track=track)
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
        t: count_parameters(build_networks(AgentConfig.from_preset("paper", track=t)))
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


MAP = {"encoder": "map", "encoder_channels": (4, 8), "latent_dim": 512, "predictor": "conv",
       "hidden_dim": 16, "context_frames": 2, "per_horizon": True, "horizons": (1, 2, 4)}


def test_a_map_encoder_keeps_the_map_and_the_conv_predictor_keeps_it_spatial() -> None:
    """encoder="map": the feature map after len(encoder_channels) strided convolutions is the
    latent (2 convolutions: 16 x 16 cells, 512 / 256 = 2 channels), flattened in NCHW order;
    the conv predictor is translation-equivariant away from the borders (a shifted input map
    gives the shifted output map, before the LayerNorm)."""
    cfg = AgentConfig.from_preset("tiny", track="A", **MAP)
    nets = build_networks(cfg)
    assert cfg.map_side == 16 and cfg.predictor_widths == (36, 6)
    x = torch.zeros(2, 1, 64, 64)
    x[:, :, 20:30, 20:30] = 1.0
    z = nets.encoder(x)
    assert z.shape == (2, 512)
    torch.testing.assert_close(z.mean(1), torch.zeros(2), atol=1e-5, rtol=0)  # LayerNorm
    assert nets.predictor(torch.randn(3, 1024)).shape == (3, 3, 512)
    p = ConvPredictor(4 * 32 * 32, 16, side=32)  # receptive field: 7 cells each way
    m = torch.zeros(1, 4, 32, 32)
    m[:, :, 14:18, 14:18] = torch.randn(1, 4, 4, 4)
    y = p.fc2(p.body(p.hidden(m.flatten(1))))
    y2 = p.fc2(p.body(p.hidden(torch.roll(m, 1, dims=3).flatten(1))))
    torch.testing.assert_close(y2[..., 7:25, 8:25], y[..., 7:25, 7:24])


@pytest.mark.parametrize("track", ["C", "D", "E"])
def test_memory_modulates_the_conv_predictor_per_cell_and_not_at_e_agg_zero(track: str) -> None:
    cfg = AgentConfig.from_preset("tiny", track=track, **MAP)
    nets = build_networks(cfg)
    z, e = torch.randn(3, 1024), torch.randn(3, cfg.exp_dim)
    base = nets.predictor(z)
    assert torch.equal(nets.modulator(nets.predictor, z, torch.zeros_like(e)).pred, base)
    assert not torch.allclose(nets.modulator(nets.predictor, z, e).pred, base)


@pytest.mark.parametrize("track", ["B", "C", "D", "E"])
def test_every_modulated_conv_predictor_stays_translation_equivariant(track: str) -> None:
    """A memory (or the oracle) tells the conv predictor about the world, not about a place:
    each track's modulation acts alike at every cell (per channel of the first hidden map, or a
    per-sample kernel delta), so a shifted input map gives the shifted output map away from the
    borders (before the LayerNorm, replaced here by the identity)."""
    cfg = AgentConfig.from_preset("tiny", track=track, **{
        **MAP, "encoder_channels": (4,), "latent_dim": 2 * 32 * 32})  # 32 x 32 cells
    nets = build_networks(cfg)
    nets.predictor.norm = torch.nn.Identity()
    e = torch.randn(1, cfg.exp_dim)
    m = torch.zeros(1, 4, 32, 32)  # 2 context maps of 2 channels
    m[:, :, 14:18, 14:18] = torch.randn(1, 4, 4, 4)
    y = nets.modulator(nets.predictor, m.flatten(1), e).pred.view(1, 3, 2, 32, 32)
    y2 = nets.modulator(nets.predictor, torch.roll(m, 1, dims=3).flatten(1), e).pred
    torch.testing.assert_close(y2.view(1, 3, 2, 32, 32)[..., 7:25, 8:25], y[..., 7:25, 7:24])


def test_a_map_needs_the_conv_predictor_and_a_latent_of_whole_channels() -> None:
    with pytest.raises(ValueError, match="latent_dim"):
        AgentConfig.from_preset("tiny", track="A", **{**MAP, "latent_dim": 500})
    with pytest.raises(ValueError, match="predictor"):
        AgentConfig.from_preset("tiny", track="A", **{**MAP, "encoder": "flat",
                                                        "encoder_channels": (4, 8, 8, 8)})
    with pytest.raises(ValueError, match="encoder_channels"):
        AgentConfig.from_preset("tiny", track="A", encoder_channels=(4, 8))
