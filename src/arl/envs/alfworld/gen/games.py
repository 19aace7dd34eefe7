"""Generated ALFWorld games on disk: game files, the cache, the solvability check.

A generated game is written exactly as ``alfworld-download`` lays out the official ones::

    <cache>/alfworld-gen/<config hash>/json_2.1.1/<split>/<task dir>/<trial dir>/
        game.tw-pddl      # {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
        traj_data.json    # {"task_id", "task_type", "pddl_params", "turk_annotations", "scene"}

``<cache>`` is ``$ARL_CACHE`` or ``~/.cache/arl``; the hash covers the generator version, its
config and the PDDL domain and grammar text, so a change of any of them writes a fresh tree.
Games are made lazily, one at a time, when first asked for (:func:`ensure_game`), and kept.

Every game is checked in the real engine before it is kept: alfworld's handcoded expert
(:class:`~arl.envs.alfworld.expert.ExpertTracker`) must win it within ``max_expert_steps``
commands. If it does not, the game is drawn again from the next attempt seed (the attempt number
is part of the game's seed, so the result is still a pure function of (split, index)). The
expert's commands are stored as the game's ``walkthrough``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arl.envs.alfworld.engine import GameEngine, acquire_engine, release_engine, require_alfworld
from arl.envs.alfworld.expert import ExpertTracker
from arl.envs.alfworld.gen.household import (
    GENERATOR_VERSION,
    SPLITS,
    GameSpec,
    Rules,
    rules_from_alfworld,
    sample_game,
    traj_data,
)
from arl.envs.alfworld.gen.pddl import problem_pddl

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
JSON_DIR = "json_2.1.1"


@dataclass(frozen=True)
class GeneratorConfig:
    """Settings of the game generator (part of the cache key).

    Attributes:
        max_expert_steps: the handcoded expert must win within this many commands.
        max_attempts: redraws of one game index before giving up.
    """

    max_expert_steps: int = 50
    max_attempts: int = 30


def cache_root() -> Path:
    """``$ARL_CACHE`` or ``~/.cache/arl``."""
    return Path(os.environ.get("ARL_CACHE") or Path.home() / ".cache" / "arl")


@functools.lru_cache(maxsize=1)
def _logic_text() -> tuple[str, str]:
    require_alfworld()  # first import of alfworld, with $ALFWORLD_DATA restored
    import alfworld  # optional: the alfworld extra, after require_alfworld

    data = Path(alfworld.__file__).parent / "data"
    return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()


def game_logic() -> dict[str, str]:
    """The PDDL domain and TextWorld grammar that ship with the ``alfworld`` package."""
    domain, grammar = _logic_text()
    return {"pddl_domain": domain, "grammar": grammar}


@functools.lru_cache(maxsize=16)
def config_hash(cfg: GeneratorConfig) -> str:
    """12 hex digits identifying (generator version, config, domain, grammar)."""
    logic = game_logic()
    blob = json.dumps({"version": GENERATOR_VERSION, "config": asdict(cfg), "logic": logic}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def generated_root(cfg: GeneratorConfig | None = None) -> Path:
    """The generated data root of ``cfg``: use it as ``$ALFWORLD_DATA`` (it holds ``json_2.1.1``)."""
    cfg = cfg or GeneratorConfig()
    return cache_root() / "alfworld-gen" / config_hash(cfg)


class _Context:
    """What writing games needs, built once per process: rules, goal library, logic."""

    _instance: _Context | None = None

    def __init__(self):
        mods = require_alfworld()
        self.rules: Rules = rules_from_alfworld(mods["constants"])
        self.goals = mods["goal_library"].gdict
        self.logic = game_logic()

    @classmethod
    def get(cls) -> _Context:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


def game_files(spec: GameSpec, walkthrough: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``game.tw-pddl`` content, ``traj_data.json`` content) of ``spec``."""
    ctx = _Context.get()
    game = {
        "pddl_domain": ctx.logic["pddl_domain"],
        "grammar": ctx.logic["grammar"].replace("UNKNOWN GOAL", spec.task.description),
        "pddl_problem": problem_pddl(spec, ctx.rules, ctx.goals),
        "solvable": walkthrough is not None,
        "walkthrough": walkthrough,
    }
    return game, traj_data(spec)


def write_game(folder: Path, spec: GameSpec, walkthrough: list[str] | None = None) -> Path:
    """Write ``spec``'s two files into ``folder``; returns the ``game.tw-pddl`` path."""
    game, traj = game_files(spec, walkthrough)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRAJ_FILE).write_text(json.dumps(traj, indent=1))
    (folder / GAME_FILE).write_text(json.dumps(game))
    return folder / GAME_FILE


def play_expert(
    gamefile: str | Path, max_steps: int, engine: GameEngine | None = None, mode: str = "handcoded"
) -> tuple[bool, list[str]]:
    """Play alfworld's expert on ``gamefile`` in the real engine; (won, commands)."""
    gamefile = str(gamefile)
    traj = json.loads((Path(gamefile).parent / TRAJ_FILE).read_text())
    own = engine is None
    engine = engine or acquire_engine()
    try:
        engine.load(gamefile)
        state = engine.reset()
        tracker = ExpertTracker(traj, mode=mode)
        tracker.start(state)
        trace: list[tuple[str, Any]] = []
        commands: list[str] = []
        while len(commands) < max_steps and not state.won:
            admissible = [c for c in state.admissible_commands if c != "help"]  # as AlfWorldEnv offers
            command = tracker.command(engine, trace, admissible)
            state = engine.step(command)
            trace.append((command, state))
            commands.append(command)
        return bool(state.won), commands
    finally:
        if own:
            release_engine(engine)


def _index_file(root: Path, split: str, index: int) -> Path:
    return root / "index" / split / f"{index:07d}.json"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")


def _publish(trial: Path, final: Path, root: Path) -> Path:
    """Move the finished ``trial`` folder to ``final`` atomically (another caller's identical copy
    already there wins); returns its game file relative to ``root``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(trial, final)
    except OSError:
        if not (final / GAME_FILE).exists():
            raise
    return final.relative_to(root) / GAME_FILE


def ensure_game(split: str, index: int, cfg: GeneratorConfig | None = None) -> Path:
    """The ``game.tw-pddl`` of generated game ``index`` of ``split``, generated on first use.

    Safe under concurrent callers (threads or processes): each builds in a private temporary
    folder and moves the finished trial folder into place atomically; the loser's copy (identical
    content) is discarded.
    """
    _check_split(split)
    cfg = cfg or GeneratorConfig()
    root = generated_root(cfg)
    marker = _index_file(root, split, index)
    if marker.exists():
        rel = json.loads(marker.read_text())["game"]
        path = root / rel
        if path.exists():
            return path
    ctx = _Context.get()
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    engine = acquire_engine()
    try:
        for attempt in range(cfg.max_attempts):
            spec = sample_game(split, index, ctx.rules, ctx.goals, attempt)
            tmp = Path(tempfile.mkdtemp(prefix=f"{split}-{index}-", dir=root / "tmp"))
            try:
                trial = tmp / spec.task_dir / spec.task_id
                gamefile = write_game(trial, spec)
                won, commands = play_expert(gamefile, cfg.max_expert_steps, engine=engine)
                engine.gamefile = None  # the temporary file is going away
                if not won:
                    continue
                write_game(trial, spec, walkthrough=commands)
                rel = _publish(trial, root / JSON_DIR / split / spec.task_dir / spec.task_id, root)
                marker.parent.mkdir(parents=True, exist_ok=True)
                part = marker.with_suffix(f".{os.getpid()}.part")
                part.write_text(json.dumps({"game": str(rel), "attempt": attempt, "expert_steps": len(commands)}))
                os.replace(part, marker)
                return root / rel
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        release_engine(engine)
    raise RuntimeError(
        f"no solvable game for {split}/{index} in {cfg.max_attempts} attempts "
        f"(the expert must win within {cfg.max_expert_steps} steps)"
    )


def _ensure_one(args: tuple[str, int, GeneratorConfig]) -> str:
    split, index, cfg = args
    return str(ensure_game(split, index, cfg))


def generate_games(
    split: str, indices: Iterable[int], cfg: GeneratorConfig | None = None, workers: int = 0
) -> list[Path]:
    """:func:`ensure_game` for each index (games already in the cache are reused).

    ``workers > 0`` generates in that many subprocesses (``spawn``); the result is the same.
    """
    cfg = cfg or GeneratorConfig()
    items = [(split, int(i), cfg) for i in indices]
    if workers <= 0 or len(items) < 2:
        return [Path(_ensure_one(item)) for item in items]
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        return [Path(p) for p in pool.map(_ensure_one, items, chunksize=1)]


def main(argv: list[str] | None = None) -> None:
    """``python -m arl.envs.alfworld.gen.games --split train --num 200``: fill the cache, time it."""
    parser = argparse.ArgumentParser(description="Generate ALFWorld-format games into the ARL cache.")
    parser.add_argument("--split", default="train", choices=SPLITS)
    parser.add_argument("--num", type=int, default=200)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0, help="generator subprocesses (0: this process)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    paths = generate_games(args.split, range(args.start, args.start + args.num), workers=args.workers)
    dt = time.perf_counter() - t0
    print(
        f"{len(paths)} games of {args.split} under {generated_root()} in {dt:.1f}s ({dt / max(len(paths), 1):.2f}s/game)"
    )


if __name__ == "__main__":
    main()
