"""The pages the findings spec lists, kept equal to what the archives give (``python src/report.py findings``).

A page marks each generated block with ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` lines, and
each generated number of its prose with ``<!-- value NAME -->...<!-- /value -->``
(:mod:`arl.analysis.values`). :func:`generate` makes the markdown of a block by name (``findings``,
``headline``, ``archives``, ``default-job``, ``<study>-<kind>``: :mod:`arl.analysis.findings`,
:mod:`arl.analysis.blocks`), :func:`write_pages` rewrites the blocks and values (``--write``), and
:func:`check_pages` regenerates them and names each number on a page that differs from what the
archives give (``--check``), so a page cannot drift from its runs.

The prose of the pages the spec lists under ``prose`` is checked too (:func:`prose_numbers`): every
number in it must be generated (in a block or a value), be part of a name (:data:`NAME`: ``Stage 2``,
``seeds 5-8``, ``T 0.6``, ``lr 1e-4``, ...), or sit in a span marked as recorded outside the archives,
``<!-- recorded: SOURCE -->...<!-- /recorded -->`` (the paper, runs that were not archived, the
machine); any other is named, so a number typed by hand about an archived run cannot go unchecked.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable
from pathlib import Path

from arl.analysis.blocks import (
    archives_block,
    calibration_block,
    collapses_block,
    contrasts_block,
    cost_block,
    default_job_block,
    format_block,
    games_block,
    scale_block,
    settings_table,
    setup_block,
    threshold_block,
    types_block,
    without_seed_block,
)
from arl.analysis.findings import Spec, findings_block, headline_block
from arl.analysis.values import inline_value

MARKER = re.compile(r"<!-- ([a-z0-9_-]+):begin -->\n(.*?)<!-- \1:end -->", re.DOTALL)
VALUE = re.compile(r"<!-- value (.+?) -->(.*?)<!-- /value -->", re.DOTALL)
RECORDED = re.compile(r"<!-- recorded: (.+?) -->(.*?)<!-- /recorded -->", re.DOTALL)


def generate(spec: Spec, name: str) -> str:
    """The markdown of block ``name``."""
    if name == "findings":
        return findings_block(spec)
    if name == "headline":
        return headline_block(spec)
    if name == "archives":
        return archives_block(spec, base=spec.root)  # on the archives' index, docs/results/README.md
    if name == "default-job":
        return default_job_block(spec)
    study_key, _, kind = name.partition("-")
    study = spec.study(study_key)
    kinds: dict[str, Callable[[], str]] = {
        "setup": lambda: setup_block(study), "settings": lambda: settings_table(study),
        "scale": lambda: scale_block(study),
        "contrasts": lambda: contrasts_block(study), "threshold": lambda: threshold_block(study),
        "collapses": lambda: collapses_block(study), "without-seed-1": lambda: without_seed_block(spec, study),
        "format": lambda: format_block(study), "cost": lambda: cost_block(study),
        "types": lambda: types_block(study), "games": lambda: games_block(study),
        "calibration": lambda: calibration_block(study),
    }
    if kind not in kinds:
        raise ValueError(f"no block kind {kind!r} (block {name!r}); kinds: {', '.join(kinds)}")
    return kinds[kind]()


def render(text: str, blocks: Callable[[str], str], values: Callable[[str], str] | None = None) -> str:
    """``text`` with every marked block's body replaced by ``blocks(name)`` and every inline value's
    by ``values(name)``."""
    text = MARKER.sub(lambda m: f"<!-- {m.group(1)}:begin -->\n{blocks(m.group(1)).rstrip()}\n<!-- {m.group(1)}:end -->",
                      text)
    if values is None:
        return text
    return VALUE.sub(lambda m: f"<!-- value {m.group(1)} -->{values(m.group(1))}<!-- /value -->", text)


def _cached_blocks(spec: Spec):
    """``block(name)``: the generated block ``name`` of ``spec``, each generated once."""
    return functools.lru_cache(maxsize=None)(lambda name: generate(spec, name))


def _cached_values(spec: Spec):
    """``value(name)``: the inline value ``name`` of ``spec`` (:func:`arl.analysis.values.inline_value`)."""
    return functools.lru_cache(maxsize=None)(lambda name: inline_value(spec, name))


def write_pages(spec: Spec) -> list[Path]:
    block, value = _cached_blocks(spec), _cached_values(spec)

    written = []
    for page, names in spec.pages.items():
        text = page.read_text()
        missing = [n for n in names if f"<!-- {n}:begin -->" not in text]
        if missing:
            raise ValueError(f"{page}: no markers for the blocks {', '.join(missing)} "
                             f"(add `<!-- NAME:begin -->` and `<!-- NAME:end -->` lines where each goes)")
        new = render(text, block, value)
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


def _table_headers(lines: list[str]) -> dict[int, list[str]]:
    """The header cells of each table row of ``lines``, by line index: the first line of its table."""
    header: list[str] | None = None
    headers = {}
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|"):
            if header is None:
                header = _cells(line)
            headers[i] = header
        else:
            header = None
    return headers


def check_text(text: str, blocks: Callable[[str], str], page: str, required: list[str] = (),
               values: Callable[[str], str] | None = None, prose: str | None = None) -> list[str]:
    """Problems of one page: each number of a generated block that differs from ``blocks(name)``,
    as ``"page:line: [block] ..."``; blocks listed in ``required`` that the page lacks; each inline
    value that differs from ``values(name)``; with ``prose`` (``"all"``, or the heading of the section
    to check), each number of the prose that is neither generated, a name nor marked recorded."""
    problems = [f"{page}: no generated block {n!r} (its markers are missing)" for n in required
                if f"<!-- {n}:begin -->" not in text]
    if values is not None:
        for m in VALUE.finditer(text):
            line = text[: m.start(2)].count("\n") + 1
            try:
                want = values(m.group(1))
            except (KeyError, ValueError) as err:
                problems.append(f"{page}:{line}: [value {m.group(1)}] cannot be generated: {err}")
                continue
            for d in _differences(m.group(2), want, None):
                problems.append(f"{page}:{line}: [value {m.group(1)}] {d}")
    if prose is not None:
        problems += [f"{page}:{line}: a number in the prose that no archive checks: {number} in {context!r} "
                     f"(generate it, `<!-- value ... -->`, or mark it `<!-- recorded: SOURCE -->`)"
                     for line, number, context in prose_numbers(text, prose)]
    for m in MARKER.finditer(text):
        name = m.group(1)
        try:
            want = blocks(name).rstrip().split("\n")
        except (KeyError, ValueError) as err:
            problems.append(f"{page}: [{name}] cannot be generated: {err}")
            continue
        got = m.group(2).rstrip("\n").split("\n")
        first = text[: m.start(2)].count("\n") + 1
        headers = _table_headers(want)
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
    block, value = _cached_blocks(spec), _cached_values(spec)

    problems = []
    prose = spec.prose
    for page, names in spec.pages.items():
        if not page.exists():
            problems.append(f"{page}: no such page")
            continue
        problems += check_text(page.read_text(), block, str(page), names, value, prose.get(page))
    return problems


# --------------------------------------------------------------------------- the prose

#: a number that is part of a name, not a measurement: a stage, seeds, a temperature, a learning rate,
#: a sampling cut, an iteration, the t interval's level (``Stage 2``, ``seeds 5-8``, ``seeds 1 and 2``,
#: ``seed-1``, ``iteration-0``, ``T 0.6``, ``lr 1e-4``, ``top-p 0.95``, ``iterations 2-6``, ``t 95 %``)
_ITEM = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
NAME = re.compile(rf"\b(?:[Ss]tages?|[Ss]eeds?|[Ii]terations?)\s+{_ITEM}(?:(?:\s*,\s*|\s+and\s+|-){_ITEM})*"
                  rf"|(?:\b(?:lr|top-[pk])|\bT)\s+{_ITEM}|\b(?:[Ss]eed|[Ii]teration)-\d+\b|\bt 95 %")
PROSE_NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w])")
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)
_SKIPPED = [MARKER, _FENCE, VALUE, RECORDED, re.compile(r"<!--.*?-->", re.DOTALL), re.compile(r"`[^`\n]*`"),
            re.compile(r"\]\([^)\s]*\)")]


def _section(text: str, heading: str) -> tuple[int, int]:
    """(start, end) of the section under the line ``heading`` (to the next heading of its level or
    above); the whole text for ``"all"``."""
    if heading == "all":
        return 0, len(text)
    m = re.search(rf"^{re.escape(heading)}\s*$", text, re.MULTILINE)
    if m is None:
        raise ValueError(f"no section {heading!r}")
    level = len(heading) - len(heading.lstrip("#"))
    nxt = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, m.end())
    return m.start(), nxt.start() if nxt else len(text)


def prose_numbers(text: str, section: str = "all") -> list[tuple[int, str, str]]:
    """(line, number, its line's text) of each number of the prose of ``text`` (its ``section``) that is
    neither in a generated block or value, in code, a comment or a link's target, in a span marked
    recorded, nor part of a name (:data:`NAME`)."""
    start, end = _section(text, section)
    masked = text
    for pattern in [*_SKIPPED, NAME]:
        masked = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), masked)
    out = []
    for m in PROSE_NUMBER.finditer(masked, start, end):
        line = masked.count("\n", 0, m.start()) + 1
        out.append((line, m.group(0), text.split("\n")[line - 1].strip()[:120]))
    return out
