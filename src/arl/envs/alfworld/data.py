"""Where ALFWorld games come from: the official layout under ``$ALFWORLD_DATA``, or the generator.

Official games, as ``alfworld-download`` lays them out::

    $ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}/<task dir>/<trial dir>/
        game.tw-pddl  traj_data.json

:func:`discover_games` applies the reference filters of alfworld's ``AlfredTWEnv``: a trial needs
``traj_data.json`` and ``game.tw-pddl``; folders with ``movable`` or ``Sliced`` in their path are
skipped; the task type must be one of the requested ones; the game file must say
``"solvable": true``. Unlike ``AlfredTWEnv`` (which keeps ``os.walk`` order), the list is sorted,
so game ``i`` of a split is the same on every machine.

:func:`resolve_source` picks the source: ``generated`` (the default whenever ``$ALFWORLD_DATA`` is
unset), ``official`` (``$ALFWORLD_DATA`` or an explicit path), or ``auto`` (official when
``$ALFWORLD_DATA`` is set, generated otherwise).
"""

from __future__ import annotations

import glob
import json
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path

from arl.envs.alfworld.gen.tables import TASK_TYPES

JSON_DIR = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
SPLITS = ("train", "valid_seen", "valid_unseen")
# alfworld's names for the evaluation splits
SPLIT_ALIASES = {"eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}
DATA_SOURCES = ("auto", "generated", "official")
DOWNLOAD_HINT = (
    "get the official games with `pip install alfworld && alfworld-download` (downloads to "
    "~/.cache/alfworld; set ALFWORLD_DATA to use another folder), then set ALFWORLD_DATA to the "
    "folder that holds json_2.1.1"
)

_SOLVABLE = re.compile(r'"solvable"\s*:\s*(true|false|null)')
_MEMO: dict[tuple, tuple[Path, ...]] = {}
_MEMO_LOCK = threading.Lock()


def canonical_split(split: str) -> str:
    """``train`` / ``valid_seen`` / ``valid_unseen`` (alfworld's eval aliases accepted)."""
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; valid: {', '.join(SPLITS + tuple(SPLIT_ALIASES))}")
    return name


def check_task_types(task_types: Sequence[str] | None) -> tuple[str, ...]:
    """The requested task types (all six when None); a clear error for unknown names."""
    if task_types is None:
        return TASK_TYPES
    out = tuple(str(t) for t in task_types)
    bad = [t for t in out if t not in TASK_TYPES]
    if bad or not out:
        raise ValueError(f"unknown task type(s) {bad or out!r}; valid: {', '.join(TASK_TYPES)}")
    return out


def is_solvable(game_file: Path) -> bool:
    """Whether ``game.tw-pddl`` says ``"solvable": true`` (a missing key counts as false)."""
    text = game_file.read_text(errors="replace")
    match = _SOLVABLE.search(text[-4096:]) or _SOLVABLE.search(text)
    if match is None:
        return False
    return match.group(1) == "true"


def read_task_type(traj_file: Path) -> str:
    """The ``task_type`` of a ``traj_data.json``."""
    return str(json.loads(traj_file.read_text())["task_type"])


def discover_games(root: str | Path, split: str, task_types: Sequence[str] | None = None) -> tuple[Path, ...]:
    """Sorted ``game.tw-pddl`` paths of ``root/json_2.1.1/<split>`` that pass the reference filters.

    ``root`` is the folder ``$ALFWORLD_DATA`` names (the one holding ``json_2.1.1``); a path that
    already ends in ``json_2.1.1`` is accepted too. Results are memoised per process.
    """
    split = canonical_split(split)
    types = check_task_types(task_types)
    base = Path(root).expanduser()
    if base.name != JSON_DIR:
        base = base / JSON_DIR
    folder = base / split
    key = (str(folder.resolve()), types)
    with _MEMO_LOCK:
        if key in _MEMO:
            return _MEMO[key]
    if not folder.is_dir():
        raise FileNotFoundError(f"no ALFWorld split folder {folder}; {DOWNLOAD_HINT}")
    found = []
    for dirpath, _dirs, files in os.walk(folder):
        if TRAJ_FILE not in files:
            continue
        if "movable" in dirpath or "Sliced" in dirpath:
            continue
        trial = Path(dirpath)
        game = trial / GAME_FILE
        if not game.exists():
            continue
        try:
            if read_task_type(trial / TRAJ_FILE) not in types or not is_solvable(game):
                continue
        except (OSError, ValueError, KeyError):
            continue
        found.append(game)
    games = tuple(sorted(found))
    with _MEMO_LOCK:
        _MEMO[key] = games
    return games


def spec_matches(item: str | Path) -> list[Path]:
    """The existing paths one game spec names: the path itself (``~`` expanded) or, for a glob
    pattern (``**`` for any depth), every match; empty when it names nothing."""
    text = os.path.expanduser(str(item))
    matches = [Path(m) for m in glob.glob(text, recursive=True)] if glob.has_magic(text) else [Path(text)]
    return [m for m in matches if m.exists()]


def find_games(spec: str | Path | Sequence[str | Path], task_types: Sequence[str] | None = None) -> tuple[Path, ...]:
    """The ``game.tw-pddl`` files ``spec`` names, sorted: a game file, a folder (every game under
    it, at any depth), a glob pattern (``~`` expanded; ``**`` for any depth), or a list of these.

    Each game needs its ``traj_data.json`` beside it (the task and its type); games of other task
    types than ``task_types`` are left out. Unlike the official tree, no game is filtered for
    solvability: a game a user names is played. A spec that names no game is an error saying so.
    """
    specs = [spec] if isinstance(spec, (str, Path)) else list(spec)
    types = check_task_types(task_types)
    found: set[Path] = set()
    for item in specs:
        matches = spec_matches(item)
        if not matches:
            raise FileNotFoundError(f"ALFWorld games: {item} names no file or folder")
        for match in matches:
            if match.is_dir():
                found.update(p for p in match.rglob(GAME_FILE))
            elif match.is_file():
                found.add(match)
    games = []
    for game in sorted(p.resolve() for p in found):
        traj = game.parent / TRAJ_FILE
        if not traj.is_file():
            raise FileNotFoundError(f"ALFWorld game {game} has no {TRAJ_FILE} beside it (the task and its type)")
        if read_task_type(traj) in types:
            games.append(game)
    if not games:
        raise FileNotFoundError(f"ALFWorld games: no {GAME_FILE} of types {list(types)} in {specs}")
    return tuple(games)


def check_official_root(root: str | Path) -> Path:
    """``root/json_2.1.1`` (or ``root`` itself when it is that folder); a clear error when missing."""
    base = Path(root).expanduser()
    folder = base if base.name == JSON_DIR else base / JSON_DIR
    if not folder.is_dir():
        raise FileNotFoundError(f"no {JSON_DIR} folder under {base} ($ALFWORLD_DATA / data_path); {DOWNLOAD_HINT}")
    return folder


def official_root(data_path: str | None = None) -> Path | None:
    """``data_path``, else ``$ALFWORLD_DATA``, else None."""
    value = data_path or os.environ.get("ALFWORLD_DATA")
    return Path(value).expanduser() if value else None


def resolve_source(data_source: str = "auto", data_path: str | None = None) -> tuple[str, Path | None]:
    """(``"official"``, root) or (``"generated"``, None) for the requested ``data_source``."""
    if data_source not in DATA_SOURCES:
        raise ValueError(f"data_source={data_source!r} is not valid; valid: {', '.join(DATA_SOURCES)}")
    if data_source == "generated":
        return "generated", None
    root = official_root(data_path)
    if data_source == "official" and root is None:
        raise ValueError(f"data_source=official needs data_path or $ALFWORLD_DATA; {DOWNLOAD_HINT}")
    if root is None:
        return "generated", None
    return "official", root
