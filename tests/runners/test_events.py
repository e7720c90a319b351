"""The run in TensorBoard (runners.online.events): the event stream is run.zarr's, a resume
neither loses nor repeats a step, the ending is a finished run's summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from runners.online.events import ENDING, ending_scalars, tag, write_ending
from tests.runners.cli_helpers import assert_events_are_the_store, event_scalars, read_events
from tests.runners.test_loop import open_loop, tiny_config


def _steps_in(path: Path) -> list[int]:
    """The steps of the metric events in one event file, in the order written."""
    return [e.step for e in EventFileLoader(str(path)).Load() if e.HasField("summary")]


def test_a_resume_after_a_kill_neither_loses_nor_repeats_an_event_step(tmp_path: Path) -> None:
    """A run that wrote its events up to step 45 and died after its checkpoint at 40 (its events
    flushed, no checkpoint at 45: a kill), resumed: TensorBoard reads every metric at steps
    1..60 once, the numbers run.zarr holds, and every evaluation at its step."""
    cfg = tiny_config()  # 60 steps; checkpoints at 20, 40, 60; metrics flushed every 5
    first = open_loop(tmp_path / "run", cfg)
    for res in first.steps():
        if res.step == 45:
            break
    assert first.saved_step == 40
    first.events.flush()  # steps 41..45 on disk, as a writer's own flush would have put them
    first.events.close()
    first.folder.release()
    (killed,) = tmp_path.joinpath("run").glob("events.out.tfevents.*")
    assert max(_steps_in(killed)) == 45

    again = open_loop(tmp_path / "run", cfg, resume=True)
    assert again.step_count == 40
    for _ in again.steps():
        pass
    again.close()
    acc = assert_events_are_the_store(tmp_path / "run")
    steps, _ = event_scalars(acc, "loss/total")
    assert np.array_equal(steps, np.arange(1, 61))  # each once: 41..45 of the killed session gone
    steps, _ = event_scalars(acc, "eval/D_shift^50")
    assert list(steps) == [20, 30, 40, 60]  # every 20 and at the switch (30)


def test_the_ending_is_the_summary_and_replaces_an_earlier_one(tmp_path: Path) -> None:
    """``write_ending``: the summary's numbers at the run's last step, its text, its figures;
    written again (a resumed run that ends again) it replaces the first."""
    s = {"headline_n": 50, "steps_done": 60,
         "adaptation_curve": [{"n": 0, "d_shift": 0.9}, {"n": 50, "d_shift": 0.7}],
         "held_out": {"ns": [0, 50], "families": {"interp": {"own": [0.8, 0.6]}},
                      "pixels": {"horizons": [2, 8], "families": {
                          "interp": {"own": [3.0, 9.5, 6.25], "no_change": [4.0, 12.0, 8.0]}}}}}
    (tmp_path / "figures").mkdir()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    fig.savefig(tmp_path / "figures" / "overview.png")
    plt.close(fig)
    assert tag("pixels/h8/interp/true future, decoded") == "pixels/h8/interp/true_future_decoded"
    assert tag("bounds/D^50/pooled/ceiling (oracle)") == "bounds/D^50/pooled/ceiling_oracle"
    assert ending_scalars(s) == {"end/D_shift^0": 0.9, "end/D_shift^50": 0.7,
                                 "held_out/D^50/interp/own": 0.6, "pixels/h8/interp/own": 9.5,
                                 "pixels/h8/interp/no_change": 12.0}  # fmt: skip
    write_ending(tmp_path, s, "# the summary")
    s["adaptation_curve"][1]["d_shift"] = 0.5
    write_ending(tmp_path, s, "# the summary, again")
    assert len(list(tmp_path.glob(f"events.out.tfevents.*{ENDING}"))) == 1
    acc = read_events(tmp_path)
    steps, values = event_scalars(acc, "end/D_shift^50")
    assert list(steps) == [60] and values[0] == np.float32(0.5)
    (text,) = acc.Tensors("summary/text_summary")
    assert text.step == 60 and text.tensor_proto.string_val[0] == b"# the summary, again"
    assert acc.Tags()["images"] == ["figures/overview"]
