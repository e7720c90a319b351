"""What every kind of study shares (``python -m runners.study KIND``): its options (``Options``,
``Seeded``, ``Backend``), its ``Plan``, the checks before anything runs (``check_passthrough``,
``check_specs``), the runs of grid points (``make_specs``, ``plan_points``), running them
(``run_specs``), and the report: the runs it reads (``collect``), its tables and its files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from runners.cli import CliError, usable_cores, writing
from runners.online.config import Preset
from runners.online.rundir import RunFolder
from runners.studies import backends, grid

#: train_online options a study sets itself (per run), so a user may not pass them through.
RESERVED = ("out", "name", "resume")


@dataclass
class Backend:
    """Where a study's runs run: its backend options."""

    kind: Annotated[Literal["local", "ray"], tyro.conf.arg(name="backend")] = "local"
    """local worker processes or Ray tasks"""
    address: str | None = None
    """Ray address (auto, ray://HOST:10001); default: start a local Ray"""
    workers: int | None = None
    """concurrent runs (local default: cores; ray: cluster decides)"""
    threads: int | None = None
    """torch threads per run (default: cores // workers; one run on an idle 2-core CPU: 2 threads 1.25x the steps/s of 1; on a machine other jobs share, 1)"""
    in_process: bool = False
    """local: call train_online in a worker process instead of a subprocess"""
    ray_working_dir: str | None = None
    """ship this folder (the repository) to Ray workers as their working_dir"""

    def make(self) -> backends.LocalBackend | backends.RayBackend:
        """The backend the options ask for (``CliError`` on nonsense)."""
        for name, value in (("workers", self.workers), ("threads", self.threads)):
            if value is not None and value < 1:
                raise CliError(f"--{name} must be at least 1, got {value}")
        if self.kind == "local":
            if self.address:
                raise CliError("--address is for --backend ray")
            return backends.LocalBackend(self.workers, self.threads, in_process=self.in_process)
        workers = self.workers or usable_cores()
        threads = self.threads or (1 if self.address else backends.threads_per_worker(workers))
        return backends.RayBackend(self.address, threads, working_dir=self.ray_working_dir)


#: How a command nests ``Backend``: its flags keep their names (``--backend``, ``--workers``).
BackendOptions = Annotated[Backend, tyro.conf.arg(name="")]


@dataclass
class Options:
    """What every kind of study takes."""

    out: str = "study"
    """output folder"""
    report_only: bool = False
    """run nothing: rebuild the report from the existing run folders"""
    dry_run: bool = False
    """run nothing: list the runs, their state and their train_online arguments"""
    backend: BackendOptions = field(default_factory=Backend)


@dataclass
class Seeded(Options):
    """A study's options with the seeds, the steps and the preset of every run."""

    seeds: tuple[int, ...] = (42, 43, 44)
    """seeds of every configuration"""
    steps: int | None = None
    """training steps per run (default: train_online's; the switch is at 2/3)"""
    preset: Preset = "cpu"
    """run preset (train_online's --preset)"""

    def seed_list(self) -> list[str]:
        """The seeds as text, each once, in order."""
        return [str(s) for s in dict.fromkeys(self.seeds)]

    def steps_args(self) -> list[str]:
        """``--steps N`` where the steps are given."""
        return [] if self.steps is None else ["--steps", str(self.steps)]

    def group(self) -> Path:
        """The runs' folder: ``OUT/runs/<preset>-<steps>``."""
        return Path(self.out) / "runs" / f"{self.preset}-{self.steps or 'default'}"

    def meta(self) -> dict[str, Any]:
        """The preset, the steps and the seeds, as a report's protocol lists them."""
        return {"preset": self.preset, "steps": self.steps or "train_online's default",
                "seeds": " ".join(self.seed_list())}


@dataclass
class Plan:
    """A study's runs, each with the label its report reads it by, in the report's order (two
    labels may share a run); ``jobs``: what the backend runs (default: each distinct run);
    ``notes``: what the report needs of the planning; ``prepare``: called once the output
    folder exists, before the runs start (the paper's datasets)."""

    runs: list[tuple[Any, backends.RunSpec]]
    jobs: Sequence[backends.Job] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[], None] | None = None

    @property
    def specs(self) -> list[backends.RunSpec]:
        """Every distinct run, in the plan's order."""
        return list(dict.fromkeys(spec for _, spec in self.runs))


def check_passthrough(extra: Sequence[str], owned: Mapping[str, str] | None = None) -> list[str]:
    """Validate the options meant for ``train_online`` with its own (generated) parser; return
    them. ``CliError`` (one line) on a bad option or one the study sets itself (``RESERVED``,
    or ``owned``: each with the study's option to use instead, "" for its own options)."""
    from runners.online import command

    extra = list(extra)
    for token in extra:
        opt = token.split("=", 1)[0]
        if opt in {f"--{o}" for o in RESERVED}:
            raise CliError(f"{opt} is set by the study for each run; use the study's --out")
        if opt in (owned or {}):
            raise CliError(f"{opt} is set by the study; use {(owned or {})[opt] or 'its own options'}")
    command.parse_command(extra, prog="runners.train_online (passed through)")
    return extra


def check_specs(specs: Sequence[backends.RunSpec]) -> None:
    """Build and resolve every run's typed ``RunConfig`` from the exact command line it will get,
    touching no folder: a bad value fails here, one line naming the run, before any run starts."""
    from runners.online import command

    for spec in specs:
        try:
            cfg = command.build_config(backends.command_for(spec, "new"))
        except CliError as err:
            raise CliError(f"run {spec.name}: {err}") from None
        if cfg.output.name is None or Path(cfg.output.out) / cfg.output.name != Path(spec.run_dir):
            raise CliError(f"run {spec.name}: --out and --name are set by the study")


def make_specs(points: Sequence[grid.Point], out: str | Path,
               common: Sequence[str] = ()) -> list[backends.RunSpec]:
    """One ``RunSpec`` per point: folder ``out/<name>``, arguments = point's + ``common``."""
    out = Path(out).resolve()
    return [backends.RunSpec(name=p.name, run_dir=str(out / p.name),
                             args=tuple([*p.train_args(), *common])) for p in points]


def run_specs(backend: backends.LocalBackend | backends.RayBackend, jobs: Sequence[backends.Job],
              log_dir: str | Path) -> list[backends.RunResult]:
    """Run (or skip) every job (a run, or a stacked set) on ``backend``, printing one line per
    run; shut Ray down after."""
    specs = [s for j in jobs for s in backends.runs_of(j)]
    todo = {s: RunFolder(s.run_dir).state() for s in specs}
    counts = {k: sum(v == k for v in todo.values()) for k in ("finished", "interrupted", "stale", "new")}
    sets = sum(isinstance(j, backends.StackedSet) for j in jobs)
    what = f"{sets} stacked set(s) of {len(specs)} run(s)" if sets else f"{len(specs)} run(s)"
    print(f"{what}: {counts['finished']} finished, {counts['interrupted']} to resume, "
          f"{counts['new'] + counts['stale']} to start; {backend.describe()}", flush=True)
    try:
        return backend.run(jobs, log_dir=str(log_dir))
    finally:
        if isinstance(backend, backends.RayBackend):
            backend.shutdown()


def plan_points(points: Sequence[grid.Point], out: str | Path, common: Sequence[str],
                stack: bool = False) -> tuple[list[backends.RunSpec], list[backends.Job]]:
    """(a ``RunSpec`` per point, in order; the jobs the backend runs): ``make_specs``' runs, or
    with ``stack`` the points equal but for their seed as stacked sets (``train_online
    --stack-seeds``; every point names its seed), whose runs live in ``out/<name without the
    seed>-s<seed>`` and recompute every latent (no stream cache). A stacked run's arguments are
    those of its run alone (its seed included), so ``check_specs`` checks each run."""
    if not stack:
        specs = make_specs(points, out, common)
        return specs, list(specs)
    if any("seed" not in p.params for p in points):
        raise CliError("--stack stacks the seeds of each point: add seed=... to --grid")
    specs: list[backends.RunSpec] = []
    sets: dict[grid.Point, list[backends.RunSpec]] = {}
    for p in points:
        unseeded = grid.Point(tuple((k, v) for k, v in p.items if k != "seed"), p.prefix)
        name = f"{unseeded.name}-s{p.params['seed']}"  # train_online --stack-seeds --name's
        specs.append(backends.RunSpec(name, str(Path(out).resolve() / name),
                                      (*p.train_args(), *common, "--no-stream-cache")))
        sets.setdefault(unseeded, []).append(specs[-1])
    return specs, [backends.StackedSet(tuple(runs)) for runs in sets.values()]


def collect(plan: Plan, out: str | Path,
            load: Callable[..., Any]) -> tuple[list[Any], list[str]]:
    """(``load(run_dir, *label)`` of each finished run, the folders of the others relative to
    ``out``): a run not finished, or one ``load`` reads as None, is missing."""
    found, missing = [], []
    for label, spec in plan.runs:
        run = load(spec.run_dir, *label) if RunFolder(spec.run_dir).is_finished() else None
        if run is None:
            missing.append(Path(spec.run_dir).relative_to(Path(out).resolve()).as_posix())
        else:
            found.append(run)
    return found, missing


def study_commands(out: str | Path, command: str) -> list[str]:
    """The commands that made a study's runs: those of its previous ``report.json``, then
    ``command`` (each once)."""
    try:
        before = json.loads((Path(out) / "report.json").read_text())["meta"]["commands"]
    except (OSError, ValueError, KeyError, TypeError):
        before = []
    return list(dict.fromkeys([*(str(c) for c in before), command]))


def write_report(out_dir: str | Path, title: str, meta: Mapping[str, Any], missing: Sequence[str],
                 body: Sequence[str] | None, payload: Mapping[str, Any]) -> Path:
    """``out_dir/report.md``: the title, the protocol (``meta``'s items, then each of
    ``meta["commands"]`` in a code block; none without ``meta``), the runs still missing and
    ``body`` (None: no run has finished); ``out_dir/report.json``: ``payload``."""
    lines = [f"# {title}", ""]
    if meta:
        lines += ["## Protocol", ""]
        lines += [f"- {k}: {v}" for k, v in meta.items() if k != "commands"]
        for cmd in meta.get("commands", []):
            lines += ["", "```", cmd, "```"]
        lines.append("")
    if missing:
        lines += [f"**Unfinished or missing runs ({len(missing)}):** "
                  + ", ".join(f"`{m}`" for m in missing) + ". Rerun the same command to finish "
                  "them; numbers below use what exists.", ""]
    lines += ["No run has finished yet.", ""] if body is None else body
    return write_files(Path(out_dir), lines, payload)


def write_files(out_dir: Path, lines: Sequence[str], payload: Mapping[str, Any],
                name: str = "report") -> Path:
    """``out_dir/<name>.md`` (``lines``) and ``out_dir/<name>.json`` (``payload``), each write
    naming its file when it fails; the first's path."""
    for path, text in ((out_dir / f"{name}.md", "\n".join(lines).rstrip() + "\n"),
                       (out_dir / f"{name}.json", json.dumps(payload, indent=2, default=jsonable)
                        + "\n")):
        with writing(path):
            path.write_text(text)
    return out_dir / f"{name}.md"


def jsonable(o: Any) -> Any:
    """``json.dumps`` default for numpy values and dataclasses (anything else as text)."""
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return vars(o) if is_dataclass(o) else str(o)


def report_failures(failed: Sequence[backends.RunResult]) -> int:
    """One line listing the failed runs (with their logs) and how to retry; the exit code."""
    if not failed:
        return 0
    print(f"{len(failed)} run(s) failed: " + ", ".join(
        f"{r.name} (exit {r.returncode}, log {r.log})" for r in failed))
    print("rerun the same command to retry them (finished runs are skipped)")
    return 1
