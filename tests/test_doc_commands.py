"""Every ``python -m runners.train_online ...`` the README and docs/ show is a command
train_online reads: its
options parse and resolve as written. Placeholders (``RUN``, ``<...>``, ``[options]``, a seed
``S``, a track ``T``) and ``--resume`` commands are left out; a command wrapped over lines (a shell
``\\`` or an inline code span) is read whole. Each resolves to what it says: every option it writes
holds the written value in the resolved config, and the options it leaves out (the protocol, the
preset, the track, the seed, the steps and the switch) their documented defaults
(docs/train_online.md, "Options"). Likewise every ``python -m runners.study KIND ...``: its kind's
options parse, each holding the written value, and the rest are train_online options the kind
leaves to its runs."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from runners import study
from runners import train_online as train_online_cli
from runners.cli import parse
from runners.online.command import build_config
from runners.online.config import flat
from runners.studies import launch

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"python -m runners\.train_online\b([^`\n|#]*)")
STUDY = re.compile(r"python -m runners\.study\b([^`\n|#]*)")
PLACEHOLDER = re.compile(r"RUN|<|\[|\.\.\.|\$|^[A-Z]$")
TRACKS = ("A", "B", "C", "D", "E")


def placeholder(argv: list[str], i: int) -> bool:
    """Whether ``argv[i]`` stands for a value (``--seed S``, ``--track T``); a track's own letter
    (``--track E``, ``--tracks A C``) is the value it says."""
    option = next((a for a in reversed(argv[:i]) if a.startswith("--")), None)
    if argv[i] in TRACKS and option in ("--track", "--tracks"):
        return False
    return bool(PLACEHOLDER.search(argv[i]))


def commands(path: Path, command: re.Pattern[str] = COMMAND) -> list[str]:
    """The option strings of ``command`` (train_online's) in ``path``, each command unwrapped."""
    text = path.read_text().replace("\\\n", " ")
    text = re.sub(r"(?<!`)`([^`]+)`(?!`)", lambda m: "`" + " ".join(m.group(1).split()) + "`", text)
    out = []
    for m in command.finditer(text):
        rest = m.group(1).strip().rstrip(")").strip()
        argv = shlex.split(rest)
        if "--resume" not in argv and not any(placeholder(argv, i) for i in range(len(argv))):
            out.append(rest)
    return out


CASES = [(p.relative_to(ROOT).as_posix(), c) for p in DOCS for c in commands(p)]


def test_the_docs_show_train_online_commands() -> None:
    assert len(CASES) >= 20 and any(f == "README.md" for f, _ in CASES)
    written = [shlex.split(c) for _, c in CASES]
    # The commands checked include ones that set the track, the protocol, the steps and switches.
    for option in ("--track", "--protocol", "--steps", "--switch", "--preset", "--no-bounds"):
        assert any(option in argv for argv in written), option


#: docs/train_online.md's "Options" table: the default of each option a command may leave out.
DEFAULTS = {"protocol": "worlds", "preset": "cpu", "track": "C", "seed": 0, "device": "auto",
            "after_switch": "memory", "out": "runs", "bounds": True}
PAPER_DEFAULTS = {"source": "stream"}  # the paper protocol's own options
#: ... ``--steps N``: 4500 (``--preset gpu``: 6000), by (preset, protocol); ``--switch``: at 2/3
#: of the steps, worlds ``gravity=0.75,direction=90``, paper 0.5.
DEFAULT_STEPS = {("gpu", "worlds"): 6000, ("gpu", "paper"): 6000}
DEFAULT_SWITCH = {"worlds": {"gravity": 0.75, "gravity_direction": 90.0}, "paper": {"gravity": 0.5}}
#: A switch's parameter names as ``--switch`` takes them (docs/train_online.md, "Switches").
SWITCH_NAMES = {"direction": "gravity_direction"}


def written_options(argv: list[str]) -> list[tuple[str, list[str]]]:
    """(field name, its written values) for each option of ``argv``, in order; ``--set
    NAME=VALUE`` as NAME with VALUE's items (JSON: ``[1, 2]`` two, ``null`` None)."""
    out: list[tuple[str, list[str]]] = []
    for token in argv:
        if token.startswith("--"):
            out.append((token[2:].replace("-", "_"), []))
        elif out[-1][0] == "set":
            name, _, text = token.partition("=")
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text
            items = value if isinstance(value, list) else [value]
            out[-1] = (name, [str(v) for v in items])
        else:
            out[-1][1].append(token)
    return out


def switch(text: str) -> dict:
    """``STEP:GRAVITY`` or ``STEP:NAME=VALUE,...`` as config.json holds it."""
    step, _, physics = text.partition(":")
    if "=" not in physics:
        return {"step": int(step), "physics": {"gravity": float(physics)}}
    pairs = (item.split("=") for item in physics.split(","))
    return {"step": int(step), "physics": {SWITCH_NAMES.get(k, k): float(v) for k, v in pairs}}


def same(value, text: str) -> bool:
    """Whether a resolved value is the one ``text`` writes."""
    if value is None or isinstance(value, bool):
        return text == str(value)
    if isinstance(value, (int, float)):
        return float(text) == value
    return value == text


@pytest.mark.parametrize(("doc", "options"), CASES)
def test_a_documented_command_parses_as_written(doc: str, options: str) -> None:
    argv = shlex.split(options)
    cfg = flat(build_config(argv).to_dict())  # the run's config.json, by field name
    given = dict(written_options(argv))
    fields = {n[3:] if n.startswith("no_") and not v else n for n, v in given.items()}
    for name, values in written_options(argv):
        if name == "switch":
            continue
        if not values:  # a flag: --capture, --no-bounds
            field, on = (name[3:], False) if name.startswith("no_") else (name, True)
            if field == "switch":
                assert cfg["switches"] == [], options
            else:
                assert field in cfg, f"--{name}: no field of the resolved config holds it"
                assert cfg[field] is on, (name, cfg[field])
            continue
        assert name in cfg, f"--{name}: no field of the resolved config holds it"
        value = cfg[name]
        if len(values) == 1 and not isinstance(value, (list, tuple)):
            assert same(value, values[0]), (name, values, value)
        else:
            assert isinstance(value, (list, tuple)), (name, values, value)
            assert len(value) == len(values), (name, values, value)
            assert all(same(v, t) for v, t in zip(value, values, strict=True)), (name, value)
    # What the command leaves out: the documented defaults.
    defaults = DEFAULTS | (PAPER_DEFAULTS if cfg["protocol"] == "paper" else {})
    for name, default in defaults.items():
        if name not in fields:
            assert cfg[name] == default, (name, cfg[name])
    steps = DEFAULT_STEPS.get((cfg["preset"], cfg["protocol"]), 4500)
    if "steps" in given:
        steps = int(given["steps"][0])
    assert cfg["steps"] == steps
    switches = [switch(t) for n, t in zip(argv, argv[1:], strict=False) if n == "--switch"]
    if "no_switch" in given:
        switches = []
    elif not switches:
        switches = [{"step": steps * 2 // 3, "physics": DEFAULT_SWITCH[cfg["protocol"]]}]
    assert cfg["switches"] == switches, options


STUDY_CASES = [(p.relative_to(ROOT).as_posix(), c) for p in DOCS for c in commands(p, STUDY)
               if c.split()[:1] not in ([], ["KIND"]) and not c.startswith("-")]


def test_the_docs_show_every_kind_of_study() -> None:
    assert {c.split()[0] for _, c in STUDY_CASES} == set(study.KINDS)
    assert any(f == "README.md" for f, _ in STUDY_CASES)


@pytest.mark.parametrize(("doc", "options"), STUDY_CASES)
def test_a_documented_study_command_parses_as_written(doc: str, options: str) -> None:
    argv = shlex.split(options)
    kind = study.kind_of(argv)
    opts, extra = parse(kind.Options, argv[1:], "study", unknown=True)
    launch.check_passthrough(extra, kind.OWNED)  # train_online's options, none the kind sets
    for name, values in written_options(argv[1:]):
        where = opts.backend if hasattr(opts.backend, name) or name == "backend" else opts
        if not hasattr(where, name) and name != "backend":
            assert f"--{name.replace('_', '-')}" in extra, name  # passed to every run
            continue
        value = where.kind if name == "backend" else getattr(where, name)
        if not values:  # a flag: --stack, --report-only
            assert value is True, (name, value)
            continue
        if isinstance(value, tuple):
            value = [v for item in value for v in (item if isinstance(item, tuple) else (item,))]
            assert len(value) == len(values), (name, values, value)
            assert all(same(v, t) for v, t in zip(value, values, strict=True)), (name, value)
        else:
            assert len(values) == 1 and same(value, values[0]), (name, values, value)


def test_the_options_tables_choices_are_the_programs() -> None:
    """Every ``--option {a,b}`` row of docs/train_online.md's options table names the choices
    ``--help`` shows (a documented value the program refuses exits 2)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        train_online_cli.main(["--help"])
    shown = dict(re.findall(r"(--[a-z-]+) \{([a-z0-9_,-]+)\}", out.getvalue()))
    rows = re.findall(r"^\| `(--[a-z-]+) \{([a-z0-9_,-]+)\}`", (ROOT / "docs" / "train_online.md").read_text(), re.M)
    assert len(rows) >= 5
    for option, choices in rows:
        assert shown.get(option) == choices, option
