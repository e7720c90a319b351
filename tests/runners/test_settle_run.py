"""A settled worlds run (``--settle``) through the online loop: cut after the settle and resumed,
it records exactly what the run done in one go records (the reservoir in the checkpoint)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tests.runners.test_loop import WORLDS, assert_same_records, open_loop, tiny_config

SETTLED = [*WORLDS, "--settle", "0.3", "--fit-updates", "2", "--set", "fit_batch=8", "--set", "fit_worlds=2"]


def test_a_settled_run_cut_after_the_settle_and_resumed_equals_one_go(tmp_path: Path) -> None:
    cfg = tiny_config(*SETTLED, protocol="worlds")
    assert cfg.agent.settle_at == 9  # 0.3 of the 30 steps of base training
    whole = open_loop(tmp_path / "whole", cfg)
    for _ in whole.steps():
        pass
    whole.close()
    kept = whole.learner.reservoir.seen
    assert 0 < kept <= (30 - 9) * cfg.agent.batch_size  # kept from the settle to the switch

    cut = open_loop(tmp_path / "cut", cfg)
    for res in cut.steps():
        if res.step == 20:
            cut.stop.request("test")
    cut.checkpoint()
    cut.folder.release()
    again = open_loop(tmp_path / "cut", cfg, resume=True)
    assert again.learner.reservoir.seen == cut.learner.reservoir.seen > 0
    for _ in again.steps():
        pass
    again.close()
    assert again.learner.reservoir.seen == kept
    a = assert_same_records(tmp_path / "whole", tmp_path / "cut")
    assert np.isfinite(a["m:loss/pred"][9:30]).all()


def test_a_run_with_the_pixel_reconstruction_cut_before_the_settle_resumes_exactly(
    tmp_path: Path,
) -> None:
    cfg = tiny_config(*SETTLED, "--recon-weight", "1.0", protocol="worlds")
    whole = open_loop(tmp_path / "whole", cfg)
    for _ in whole.steps():
        pass
    whole.close()
    assert whole.learner.nets.recon is not None
    cut = open_loop(tmp_path / "cut", cfg)
    for res in cut.steps():
        if res.step == 5:  # the decoder still learning with the encoder
            cut.stop.request("test")
    cut.checkpoint()
    cut.folder.release()
    again = open_loop(tmp_path / "cut", cfg, resume=True)
    for _ in again.steps():
        pass
    again.close()
    for a, b in zip(whole.learner.nets.recon.parameters(), again.learner.nets.recon.parameters(), strict=True):
        assert torch.equal(a, b)
    assert_same_records(tmp_path / "whole", tmp_path / "cut")
