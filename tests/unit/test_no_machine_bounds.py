"""No default test bounds a figure that depends on the machine (wall time, RSS, throughput).

Such a bound passes on the machine it was written on and fails on another CPU, allocator or load
(a fresh clone's ``make test`` went red on a machine with AVX-512 at 1.21 of a memory plan bounded at
1.2). The default suite checks deterministic figures instead (operators and tensor bytes counted by
``arl.plan.live_bytes``, flags a run records); timings and RSS belong in ``bench/`` or in tests marked
``slow``. This test reads every test file and lists each ``assert`` outside a slow test that bounds (``<``,
``<=``, ``>``, ``>=``; ``> 0`` excepted) a clock reading, a measured figure or a name computed from one.
"""

from __future__ import annotations

import ast
import re

from arl_testing import ROOT

CLOCKS = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("time", "process_time")}
# names and keys that hold a measured duration, memory or rate (the bench's "measured" RSS figures)
MEASURED = re.compile(r"^(elapsed|seconds|secs|wall(_s)?|duration|rss|high_water|peak_rss|.*_per_s|measured)$")


def _marked_slow(fn: ast.FunctionDef) -> bool:
    return any("slow" in ast.unparse(d) for d in fn.decorator_list)


def _machine_figures(node: ast.AST, tainted: set[str] = frozenset()) -> list[str]:
    """The clocks, measured names and keys, and names computed from them (``tainted``) read in ``node``."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and isinstance(sub.func.value, ast.Name):
            if (sub.func.value.id, sub.func.attr) in CLOCKS:
                found.append(ast.unparse(sub))
        elif isinstance(sub, ast.Name) and (MEASURED.match(sub.id) or sub.id in tainted):
            found.append(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and MEASURED.match(sub.value):
            found.append(repr(sub.value))
    return found


def _tainted(fn: ast.AST) -> set[str]:
    """Names a function assigns from a machine figure (``ratio = measured / planned``), to a fixpoint."""
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign) and n.value]
    tainted: set[str] = set()
    while True:
        more = {t.id for a in assigns if _machine_figures(a.value, tainted)
                for target in (a.targets if isinstance(a, ast.Assign) else [a.target])
                for t in ast.walk(target) if isinstance(t, ast.Name)} - tainted
        if not more:
            return tainted
        tainted |= more


ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_bound(compare: ast.Compare, tainted: set[str]) -> bool:
    """An ordering comparison on a machine figure, other than ``figure > 0`` (the figure was recorded)."""
    if not any(isinstance(op, ORDER) for op in compare.ops) or not _machine_figures(compare, tainted):
        return False
    presence = (len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Gt | ast.GtE)
                and isinstance(compare.comparators[0], ast.Constant) and compare.comparators[0].value == 0)
    return not presence


def _bounds_in(fn: ast.AST) -> list[ast.Assert]:
    tainted = _tainted(fn)
    return [node for node in ast.walk(fn) if isinstance(node, ast.Assert)
            and any(isinstance(c, ast.Compare) and _is_bound(c, tainted) for c in ast.walk(node.test))]


def machine_bounds() -> list[str]:
    """``path:line: assert ...`` for each bound on a machine figure outside a slow test."""
    out = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and not _marked_slow(fn):
                out += [f"{path.relative_to(ROOT)}:{a.lineno}: {ast.unparse(a)[:120]}" for a in _bounds_in(fn)]
    return sorted(set(out))


def test_no_default_test_asserts_on_time_or_resident_memory():
    assert machine_bounds() == []


def test_the_scan_finds_a_clock_and_an_rss_bound(tmp_path):
    """The scan itself on the forms it must catch and the ones it must leave."""
    code = '''
import time, pytest
def test_timed():
    t0 = time.monotonic(); run()
    assert time.monotonic() - t0 < 3
def test_rss(r):
    ratio = r["measured"]["update"] / r["planned"]["update"]
    assert 0.8 <= ratio <= 1.2
def test_recorded(figures):
    assert figures["tokens_per_s"] > 0 and figures["generate_s"] == 2.0
def test_polls():
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline: pass
    assert done()
@pytest.mark.slow
def test_slow_timed():
    elapsed = 1.0
    assert elapsed < 60
'''
    fns = {f.name: f for f in ast.walk(ast.parse(code)) if isinstance(f, ast.FunctionDef)}
    flagged = {name for name, fn in fns.items() if not _marked_slow(fn) and _bounds_in(fn)}
    assert flagged == {"test_timed", "test_rss"}
