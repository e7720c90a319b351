"""The layout's rules, checked on the source (docs/architecture.md).

- No import cycle among the modules of ``env``, ``agent`` and ``runners``, counting every import
  a module names: at the top, inside functions and under ``TYPE_CHECKING``. ``from pkg.mod import
  x`` depends on ``pkg.mod``; a package's ``__init__`` is a module of its own, depending on what
  it re-exports, so a circle through it (``a`` imports ``pkg``, ``pkg`` re-exports ``pkg.b``,
  ``pkg.b`` imports ``a``) is one. Importing a package's own modules from inside it does not
  count as depending on the package.
- The packages depend one way: ``env`` on nothing of ours, ``agent`` on ``env`` alone,
  ``probes`` (instruments for a trained learner) on ``env`` and ``agent``, ``runners`` on all.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("env", "agent", "probes", "runners")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports (the longest known prefix of each name)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            parts = name.split(".")
            for k in range(len(parts), 0, -1):
                if ".".join(parts[:k]) in modules:
                    found.add(".".join(parts[:k]))
                    break
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    modules = set(files)
    return {
        m: {d for d in imports(p, modules) if d != m and not m.startswith(d + ".")}
        for m, p in files.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_no_import_cycle_type_only_ones_included() -> None:
    edges = graph()
    assert "agent.step" in edges and "agent.capture" in edges["agent.learner"]
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])


def test_the_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_packages_depend_one_way() -> None:
    for m, deps in graph().items():
        if m.startswith("env"):
            assert not any(d.startswith(("agent", "probes", "runners")) for d in deps), m
        if m.startswith("agent"):
            assert not any(d.startswith(("probes", "runners")) for d in deps), m
        if m.startswith("probes"):
            assert not any(d.startswith("runners") for d in deps), m
