"""Loader for DeepMind Boxoban level files (github.com/deepmind/boxoban-levels).

A file holds puzzles separated by header lines ``; N``, each followed by a 10x10 grid:
``#`` wall, ``@`` player, ``$`` box, ``.`` goal, space floor (``*`` box on goal and ``+`` player on
goal are accepted too).
"""

from __future__ import annotations

import functools
from pathlib import Path

from arl.envs.sokoban.level import Level


def parse_boxoban(text: str, source: str = "") -> list[Level]:
    """All puzzles of one Boxoban file's text; each level is named ``source:N``."""
    levels: list[Level] = []
    header: str | None = None
    rows: list[str] = []

    def flush() -> None:
        if header is not None and any(row.strip() for row in rows):
            name = f"{source}:{header}" if source else header
            levels.append(Level.from_text("\n".join(rows), name=name))

    for line in text.splitlines():
        if line.startswith(";"):
            flush()
            header, rows = line[1:].strip(), []
        elif header is not None:
            rows.append(line)
    flush()
    return levels


def boxoban_files(path: str | Path) -> list[Path]:
    """``path`` itself if it is a file, else every ``*.txt`` below it, sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if files:
            return files
        raise FileNotFoundError(f"no *.txt Boxoban files under {path}")
    raise FileNotFoundError(f"Boxoban path not found: {path}")


@functools.lru_cache(maxsize=8)
def _load_cached(resolved: str) -> tuple[Level, ...]:
    levels: list[Level] = []
    for file in boxoban_files(resolved):
        levels += parse_boxoban(file.read_text(), source=file.stem)
    if not levels:
        raise ValueError(f"no Boxoban puzzles in {resolved}")
    return tuple(levels)


def load_boxoban(path: str | Path) -> list[Level]:
    """Levels of a Boxoban file, or of all ``*.txt`` files of a folder (sorted by path).

    Results are cached per resolved path, so many environments can share one load.
    """
    return list(_load_cached(str(Path(path).resolve())))
