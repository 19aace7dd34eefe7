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


def lazy_imports(src: Path = SRC.parent) -> list[tuple[str, int, bool]]:
    """``(file, line, commented)`` of every import statement inside a function under ``src``;
    commented: a ``#`` comment on the lines of its run of consecutive imports, or on one of the two
    lines above that run (why they are lazy)."""
    found = []
    for path in sorted(src.rglob("*.py")):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                for body in (getattr(node, name, None) for name in ("body", "orelse", "finalbody", "handlers")):
                    run: list[ast.stmt] = []
                    for stmt in [*(body if isinstance(body, list) else []), None]:  # None closes the last run
                        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                            run.append(stmt)
                            continue
                        if run:
                            near = lines[max(0, run[0].lineno - 3): run[-1].end_lineno]
                            commented = any("#" in line for line in near)
                            found += [(str(path.relative_to(src)), imp.lineno, commented) for imp in run]
                        run = []
    return sorted(set(found))


LAZY_IMPORTS_MAX = 60  # optional dependencies and heavy imports kept off the start-up path (and the filter
#                          contract's keys, read from the schema that imports the filters)


def test_imports_inside_functions_are_few_and_each_says_why():
    """An import inside a function hides a dependency: only optional packages and heavy imports
    kept off the start-up path (``src/train.py``'s checks, ``src/plan.py --help``) stay lazy, each
    with a comment saying which."""
    found = lazy_imports()
    assert len(found) <= LAZY_IMPORTS_MAX, f"{len(found)} imports inside functions (at most {LAZY_IMPORTS_MAX})"
    silent = [f"{path}:{line}" for path, line, commented in found if not commented]
    assert not silent, f"imports inside functions without a comment saying why: {silent}"


def _functions(src: Path = SRC.parent):
    for path in sorted(src.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(src)}:{fn.lineno} {fn.name}", fn


LONG_FUNCTIONS_MAX = 3  # over 50 lines, docstring included: the loss, vLLM's set-up, the plan's advice
# over 6 parameters (self excluded): constructors whose keyword parameters are their config keys (the four
# environments' and the OpenEnv adapter's env.kwargs and the agent program env's with its episode runner and recording gateway, whose limits
# they pass on, the collapse detector's and the SFT stage's Hydra groups), load_policy, vLLM's engine and the Sokoban
# level generator
WIDE_FUNCTIONS_MAX = 14


def test_functions_stay_short_and_narrow():
    """Ratchets on the house's shape: functions over 50 lines, and over 6 parameters, may only
    become fewer (lower the limit when they do)."""
    long = [name for name, fn in _functions() if fn.end_lineno - fn.lineno + 1 > 50]
    assert len(long) <= LONG_FUNCTIONS_MAX, f"{len(long)} functions over 50 lines: {long}"
    wide = [name for name, fn in _functions()
            if len([a for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs if a.arg not in ("self", "cls")]) > 6]
    assert len(wide) <= WIDE_FUNCTIONS_MAX, f"{len(wide)} functions with more than 6 parameters: {wide}"
