"""The pages the findings spec lists, kept equal to what the archives give (``python src/report.py findings``).

A page marks each generated block with ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` lines.
:func:`generate` makes the markdown of a block by name (``findings``, ``headline``, ``archives``,
``default-job``, ``<study>-<kind>``: :mod:`arl.analysis.findings`, :mod:`arl.analysis.blocks`),
:func:`write_pages` rewrites the blocks between their markers (``--write``), and :func:`check_pages`
regenerates every block and names each number on a page that differs from what the archives give
(``--check``), so a page cannot drift from its runs.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Callable

from arl.analysis.blocks import (
    archives_block,
    calibration_block,
    collapses_block,
    contrasts_block,
    cost_block,
    default_job_block,
    format_block,
    games_block,
    settings_table,
    setup_block,
    threshold_block,
    types_block,
    without_seed_block,
)
from arl.analysis.findings import Spec, findings_block, headline_block

MARKER = re.compile(r"<!-- ([a-z0-9_-]+):begin -->\n(.*?)<!-- \1:end -->", re.S)


def generate(spec: Spec, name: str) -> str:
    """The markdown of block ``name``."""
    if name == "findings":
        return findings_block(spec)
    if name == "headline":
        return headline_block(spec)
    if name == "archives":
        return archives_block(spec)
    if name == "default-job":
        return default_job_block(spec)
    study_key, _, kind = name.partition("-")
    study = spec.study(study_key)
    kinds: dict[str, Callable[[], str]] = {
        "setup": lambda: setup_block(study), "settings": lambda: settings_table(study),
        "contrasts": lambda: contrasts_block(study), "threshold": lambda: threshold_block(study),
        "collapses": lambda: collapses_block(study), "without-seed-1": lambda: without_seed_block(spec, study),
        "format": lambda: format_block(study), "cost": lambda: cost_block(study),
        "types": lambda: types_block(study), "games": lambda: games_block(study),
        "calibration": lambda: calibration_block(study),
    }
    if kind not in kinds:
        raise ValueError(f"no block kind {kind!r} (block {name!r}); kinds: {', '.join(kinds)}")
    return kinds[kind]()


def render(text: str, blocks: Callable[[str], str]) -> str:
    """``text`` with every marked block's body replaced by ``blocks(name)``."""
    return MARKER.sub(lambda m: f"<!-- {m.group(1)}:begin -->\n{blocks(m.group(1)).rstrip()}\n<!-- {m.group(1)}:end -->",
                      text)


def _cached_blocks(spec: Spec):
    """``block(name)``: the generated block ``name`` of ``spec``, each generated once."""
    import functools

    return functools.lru_cache(maxsize=None)(lambda name: generate(spec, name))


def write_pages(spec: Spec) -> list[Path]:
    block = _cached_blocks(spec)

    written = []
    for page, names in spec.pages.items():
        text = page.read_text()
        missing = [n for n in names if f"<!-- {n}:begin -->" not in text]
        if missing:
            raise ValueError(f"{page}: no markers for the blocks {', '.join(missing)} "
                             f"(add `<!-- NAME:begin -->` and `<!-- NAME:end -->` lines where each goes)")
        new = render(text, block)
        if new != text:
            page.write_text(new)
            written.append(page)
    return written


NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else [line]


def _differences(page_line: str, want_line: str, header: list[str] | None) -> list[str]:
    """Each number of ``page_line`` that differs from ``want_line``'s at the same place, named by
    its table row and column when the lines are table rows."""
    got_cells, want_cells = _cells(page_line), _cells(want_line)
    out = []
    if len(got_cells) != len(want_cells):
        return [f"the line reads {page_line.strip()[:160]!r}; the archive gives {want_line.strip()[:160]!r}"]
    for i, (g, w) in enumerate(zip(got_cells, want_cells)):
        gn, wn = NUMBER.findall(g), NUMBER.findall(w)
        where = (f"row {want_cells[0][:60]!r}, column {header[i]!r}: " if header and i < len(header) and len(want_cells) > 1
                 else "")
        if len(gn) != len(wn):
            if g != w:
                out.append(f"{where}{g[:160]!r}; the archive gives {w[:160]!r}")
            continue
        for a, b in zip(gn, wn):
            if a != b:
                out.append(f"{where}the page has {a}, the archive gives {b}")
        if not out and g != w and gn == wn:
            out.append(f"{where}the text reads {g[:160]!r}; the generator writes {w[:160]!r}")
    return out


def check_text(text: str, blocks: Callable[[str], str], page: str, required: list[str] = ()) -> list[str]:
    """Problems of one page: each number of a generated block that differs from ``blocks(name)``,
    as ``"page:line: [block] ..."``; blocks listed in ``required`` that the page lacks."""
    problems = [f"{page}: no generated block {n!r} (its markers are missing)" for n in required
                if f"<!-- {n}:begin -->" not in text]
    for m in MARKER.finditer(text):
        name = m.group(1)
        try:
            want = blocks(name).rstrip().split("\n")
        except (KeyError, ValueError) as err:
            problems.append(f"{page}: [{name}] cannot be generated: {err}")
            continue
        got = m.group(2).rstrip("\n").split("\n")
        first = text[: m.start(2)].count("\n") + 1
        header: list[str] | None = None
        headers = {}
        for i, line in enumerate(want):  # the header of each table row: the first line of its table
            if line.lstrip().startswith("|"):
                if header is None:
                    header = _cells(line)
                headers[i] = header
            else:
                header = None
        matcher = difflib.SequenceMatcher(a=got, b=want, autojunk=False)
        for op, a0, a1, b0, b1 in matcher.get_opcodes():
            if op == "equal":
                continue
            if op == "replace" and a1 - a0 == b1 - b0:
                for k in range(a1 - a0):
                    for d in _differences(got[a0 + k], want[b0 + k], headers.get(b0 + k)):
                        problems.append(f"{page}:{first + a0 + k}: [{name}] {d}")
                continue
            for k in range(a0, a1):
                problems.append(f"{page}:{first + k}: [{name}] a line the archive does not give: {got[k].strip()[:160]!r}")
            for k in range(b0, b1):
                problems.append(f"{page}:{first + a0}: [{name}] a line missing: the archive gives {want[k].strip()[:160]!r}")
    return problems


def check_pages(spec: Spec) -> list[str]:
    """Every problem of every page the spec lists (none: the pages say what the archives give)."""
    block = _cached_blocks(spec)

    problems = []
    for page, names in spec.pages.items():
        if not page.exists():
            problems.append(f"{page}: no such page")
            continue
        problems += check_text(page.read_text(), block, str(page), names)
    return problems
