"""Every ``python -m runners.train_online ...`` the README and docs/ show (docs/archive.md, the
record of superseded studies and removed options, aside) is a command train_online reads: its
options parse and resolve as written. Placeholders (``RUN``, ``<...>``, ``[options]``, a seed
``S``) and ``--resume`` commands are left out; a command wrapped over lines (a shell ``\\`` or
an inline code span) is read whole."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from runners.online.command import build_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "archive.md")]
COMMAND = re.compile(r"python -m runners\.train_online\b([^`\n|#]*)")
PLACEHOLDER = re.compile(r"RUN|<|\[|\.\.\.|\$|^[A-Z]$")


def commands(path: Path) -> list[str]:
    """The train_online option strings in ``path``, each command unwrapped."""
    text = path.read_text().replace("\\\n", " ")
    text = re.sub(r"(?<!`)`([^`]+)`(?!`)", lambda m: "`" + " ".join(m.group(1).split()) + "`", text)
    out = []
    for m in COMMAND.finditer(text):
        rest = m.group(1).strip().rstrip(")").strip()
        argv = shlex.split(rest)
        if "--resume" not in argv and not any(PLACEHOLDER.search(a) for a in argv):
            out.append(rest)
    return out


CASES = [(p.relative_to(ROOT).as_posix(), c) for p in DOCS for c in commands(p)]


def test_the_docs_show_train_online_commands() -> None:
    assert len(CASES) >= 20 and any(f == "README.md" for f, _ in CASES)


@pytest.mark.parametrize(("doc", "options"), CASES)
def test_a_documented_command_parses_as_written(doc: str, options: str) -> None:
    build_config(shlex.split(options))
