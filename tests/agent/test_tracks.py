"""agent.tracks: each track's table entry says what its modulator does."""

from __future__ import annotations

import pytest

from agent import AgentConfig, tracks
from agent.modulators import build_modulator


@pytest.mark.parametrize("letter", list(tracks.TRACKS))
@pytest.mark.parametrize("blocks", [0, 2])
def test_a_track_reads_memory_exactly_when_its_modulator_does(letter: str, blocks: int) -> None:
    cfg = AgentConfig.of_size("tiny", track=letter, predictor_blocks=blocks)
    assert build_modulator(cfg).uses_memory is tracks.reads_memory(letter)


@pytest.mark.parametrize("letter", list(tracks.TRACKS))
def test_the_preset_takes_the_tracks_lr_and_kappa(letter: str) -> None:
    cfg = AgentConfig.of_size("paper", track=letter)
    assert (cfg.lr, cfg.kappa) == (tracks.track(letter).lr, tracks.track(letter).kappa)


def test_the_floor_reads_no_memory_and_its_ceiling_takes_the_default_memory_track() -> None:
    assert not tracks.reads_memory(tracks.FLOOR)
    assert tracks.ceiling_track([tracks.FLOOR]) == tracks.MEMORY_DEFAULT == "C"
    assert [tracks.ceiling_track(t) for t in "BCDE"] == list("BCDE")
    assert tracks.ceiling_track("ADB") == "D" and tracks.ceiling_track("") == "C"
    assert (tracks.INPUT, tracks.WEIGHTS) == ("B", "C")  # the paper's comparison


def test_an_unknown_track_is_one_error_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^track: unknown track 'F', expected one of A, B, C, D, E$"):
        tracks.track("F")
    with pytest.raises(ValueError, match="track: unknown track 'F'"):
        AgentConfig.of_size("tiny", track="F")
    with pytest.raises(ValueError, match="track A has no memory pathway"):
        AgentConfig.of_size("tiny", track="A", oracle=True)
