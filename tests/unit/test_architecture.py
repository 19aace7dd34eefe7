"""The rooms of ``src/arl`` and their imports, against the diagram in ``docs/architecture.md``.

A room is a top-level subpackage or module of ``arl``. Every import counts, also those inside
functions. The diagram must show exactly the imports the code has, the arrows into ``utils``
included; the graph must have no cycle; the ground floor imports no room but ``utils``, and
``utils`` none.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from arl_testing import ROOT

SRC = ROOT / "src" / "arl"
GROUND = ("algos", "distributed", "envs", "models", "utils")


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "arl" and len(parts) > 1 else None


def room_imports(src: Path = SRC) -> dict[str, set[str]]:
    """``{room: rooms it imports}`` from every ``import`` statement of every file of ``src``."""
    edges: dict[str, set[str]] = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = _room(module)
        if here is None:
            continue
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this file's package
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                targets = [base] + ([f"{base}.{a.name}" for a in node.names] if base == "arl" else [])
            for target in targets:
                other = _room(target)
                if other and other != here:
                    edges.setdefault(here, set()).add(other)
    return edges


def diagram_edges(doc: Path = ROOT / "docs" / "architecture.md") -> tuple[set[str], set[tuple[str, str]]]:
    """(rooms, arrows) of the ```mermaid block under "## Rooms" in the architecture doc."""
    text = doc.read_text()
    section = text[text.index("## Rooms") :]
    block = re.search(r"```mermaid\n(.*?)```", section, re.DOTALL).group(1)
    arrows = set(re.findall(r"^\s*(\w+)\s*-->\s*(\w+)\s*$", block, re.MULTILINE))
    rooms = set(re.findall(r"^\s*(\w+)\s*$", block, re.MULTILINE)) | {r for arrow in arrows for r in arrow}
    return rooms - {"flowchart"}, arrows


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    return found


def test_the_room_graph_has_no_cycle_and_a_ground_floor():
    edges = room_imports()
    assert _cycles(edges) == []
    for room in GROUND:
        assert edges.get(room, set()) <= {"utils"}, f"{room} imports {sorted(edges[room] - {'utils'})}"
    assert not edges.get("utils"), f"utils imports {sorted(edges['utils'])}: utilities sit below every room"


def test_the_diagram_shows_exactly_the_imports():
    edges = room_imports()
    actual = {(a, b) for a, targets in edges.items() for b in targets}
    rooms, drawn = diagram_edges()
    code_rooms = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
                  if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert not actual - drawn, f"imports missing from docs/architecture.md's diagram: {sorted(actual - drawn)}"
    assert not drawn - actual, f"arrows in docs/architecture.md with no import behind them: {sorted(drawn - actual)}"
    assert rooms == code_rooms, f"rooms: only in the doc {sorted(rooms - code_rooms)}, only in the code {sorted(code_rooms - rooms)}"


def test_the_checker_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "arl"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("def f():\n    from arl.b import x\n")
    (pkg / "b" / "__init__.py").write_text("from ..a import f\n")
    edges = room_imports(pkg)
    assert edges == {"a": {"b"}, "b": {"a"}} and _cycles(edges)
