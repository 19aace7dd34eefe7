"""``AlfWorldEnv``: ALFWorld on the real ``alfworld`` engine (TextWorld + PDDL), TextEnv protocol.

Each episode plays one ``game.tw-pddl`` in alfworld's own engine stack (``PddlEnv`` +
``AlfredDemangler`` + ``AlfredInfos``, see :mod:`arl.envs.alfworld.engine`). Games come from the
official ``json_2.1.1`` tree under ``$ALFWORLD_DATA`` or, by default, from the offline generator
(:mod:`arl.envs.alfworld.gen`); see :mod:`arl.envs.alfworld.data`.

Seeds. ``reset(seed)`` with ``seed < val_seed_base`` plays game ``seed % n`` of ``split``
(training); a seed ``>= val_seed_base`` plays game ``(seed - val_seed_base) % n`` of ``val_split``.
``val_seed_base`` defaults to the rollout datamodule's ``VAL_SEED_BASE`` (2**30), so the
validation episodes of a run are the held-out split's games and never a training game.

Rewards and ends, as the reference setups: reward ``10 * won`` on the winning step, 0 otherwise;
the episode ends when the task is won or after ``max_steps`` (50) env steps. Every ``step`` is an
env step, invalid ones included. An action that is not admissible (the agent loop's no-op
``noop``, empty text, 100k characters, control characters...) goes to the engine like any
command and gets its answer, ``Nothing happens.``; the state does not change. ``help`` is not
offered (as in verl-agent's prompt) and counts as inadmissible.

``info``: ``task`` (the goal text, e.g. ``put a clean mug in coffeemachine``), ``task_type`` (one
of the six ALFWorld types), ``admissible_actions``, ``won``, ``score`` (1.0 when won), ``anchor``
(the observation plus the sorted admissible commands: what the agent can tell about the state; after
a command that was not admissible, with ``noop_anchor="state"`` (the default), the anchor of the state
it failed in, which that command did not change: GiGPO then compares a retry with the other decisions
taken in that state, not every "Nothing happens." of a place with each other),
``steps``, ``gamefile``, ``action_is_admissible``; with ``notes=True`` also ``notes`` (where the
agent stands, :mod:`arl.envs.alfworld.notes`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arl.envs.alfworld.data import (
    canonical_split,
    check_official_root,
    check_task_types,
    discover_games,
    find_games,
    resolve_source,
)
from arl.envs.alfworld.engine import EngineState, acquire_engine, release_engine, require_alfworld
from arl.envs.alfworld.expert import EXPERT_MODES, ExpertTracker
from arl.envs.alfworld.gen.games import GeneratorConfig, ensure_game
from arl.envs.alfworld.gen.tables import TASK_TYPES
from arl.envs.alfworld.notes import Notes
from arl.envs.alfworld.prompt import PROMPT_STYLES, render_compact_prompt, render_prompt
from arl.envs.base import VAL_SEED_BASE, EnvSpec, StepResult

MAX_STEPS = 50
WIN_REWARD = 10.0
INVALID_ACTION = "noop"
MAX_COMMAND_CHARS = 1000  # longer text cannot be a command; it is cut before reaching the engine
#: the anchor after a command that was not admissible: the state it failed in (unchanged), or the
#: observation it got ("Nothing happens.", verl-agent's anchor) with the admissible commands
NOOP_ANCHORS = ("state", "observation")
# generated pools (games are made on first use); validation sizes as the official splits
DEFAULT_NUM_GAMES = {"train": 400, "valid_seen": 140, "valid_unseen": 134}
_TASK_PREFIX = "Your task is to: "
_TRAJ_MEMO: dict[str, dict[str, Any]] = {}


def task_from_intro(intro: str) -> str:
    """The goal text of an intro observation (``Your task is to: put ... .`` -> ``put ...``)."""
    at = intro.rfind(_TASK_PREFIX)
    if at < 0:
        return ""
    return intro[at + len(_TASK_PREFIX) :].strip().rstrip(".").strip()


def read_traj(gamefile: str) -> dict[str, Any]:
    """The ``traj_data.json`` next to ``gamefile`` (memoised)."""
    if gamefile not in _TRAJ_MEMO:
        _TRAJ_MEMO[gamefile] = json.loads((Path(gamefile).parent / "traj_data.json").read_text())
    return _TRAJ_MEMO[gamefile]


class AlfWorldEnv:
    """ALFWorld as a multi-turn text environment (see the module docstring).

    Args:
        data_source: ``auto`` (official games when ``$ALFWORLD_DATA`` or ``data_path`` is set,
            else generated), ``generated`` or ``official``.
        data_path: the folder holding ``json_2.1.1`` (overrides ``$ALFWORLD_DATA``).
        games: the user's own games instead of a split tree: a ``game.tw-pddl`` file (with its
            ``traj_data.json``), a folder of them (any depth), a glob, or a list of these
            (:func:`~arl.envs.alfworld.data.find_games`); training seeds play them in sorted
            order. Overrides ``data_source``.
        val_games: the same for validation seeds (default: ``games``).
        split: training split (``train``; ``valid_seen`` / ``valid_unseen`` also accepted).
        val_split: split of seeds ``>= val_seed_base`` (``valid_seen``, alfworld's
            ``eval_in_distribution``, as the ARLArena ALFWorld trainer validates:
            agent_system/environments/env_manager.py; ``valid_unseen`` holds out whole floor
            plans).
        val_seed_base: first validation seed.
        num_games: games per split: an int for every split or a mapping ``{split: n}``. For
            generated data the size of each split's pool (default :data:`DEFAULT_NUM_GAMES`); for
            official data a cap on the sorted list (default: all games).
        task_types: restrict to these task types (default: all six).
        max_steps: env steps per episode.
        prompt_style: ``full`` (verl-agent's prompt) or ``compact`` (for the embedded tiny model).
        notes: with ``compact``, the prompt also says where the agent is, what it holds, which
            receptacles it has not visited and where it saw the task's objects, kept from its own
            observations (:mod:`arl.envs.alfworld.notes`; ``info["notes"]``).
        expert: ``handcoded`` (alfworld's handcoded expert, planner fallback) or ``planner``.
        noop_anchor: the ``anchor`` after a command that was not admissible: ``state`` (the anchor
            of the state it failed in, which it did not change) or ``observation`` (its own
            ``Nothing happens.`` with the admissible commands).
        generator: keyword arguments of :class:`~arl.envs.alfworld.gen.GeneratorConfig`.
        speedups: the engine's memoisations (:func:`~arl.envs.alfworld.engine.install_speedups`).
    """

    def __init__(
        self,
        *,
        data_source: str = "auto",
        data_path: str | None = None,
        games: str | list[str] | None = None,
        val_games: str | list[str] | None = None,
        split: str = "train",
        val_split: str = "valid_seen",
        val_seed_base: int = VAL_SEED_BASE,
        num_games: int | Mapping[str, int] | None = None,
        task_types: list[str] | tuple[str, ...] | None = None,
        max_steps: int = MAX_STEPS,
        prompt_style: str = "full",
        notes: bool = False,
        expert: str = "handcoded",
        noop_anchor: str = "state",
        generator: Mapping[str, Any] | None = None,
        speedups: bool = True,
    ):
        self._check_args(max_steps, prompt_style, notes, expert, val_seed_base)
        if noop_anchor not in NOOP_ANCHORS:
            raise ValueError(f"noop_anchor={noop_anchor!r} is not valid; valid: {', '.join(NOOP_ANCHORS)}")
        self.noop_anchor = noop_anchor
        self.split = canonical_split(split)
        self.val_split = canonical_split(val_split)
        self.val_seed_base = int(val_seed_base)
        self.task_types = check_task_types(task_types)
        self._find_sources(data_source, data_path, games, val_games)
        self.num_games = self._num_games(num_games)
        self.max_steps = int(max_steps)
        self.prompt_style = prompt_style
        self.notes = bool(notes)
        self._notes: Notes | None = None
        self.expert_mode = expert
        self.speedups = bool(speedups)
        require_alfworld()  # the clear install error, at construction
        self.generator = GeneratorConfig(**dict(generator or {}))
        self.spec = EnvSpec(
            name="alfworld",
            max_turns=self.max_steps,
            invalid_action=INVALID_ACTION,
            render_prompt=render_prompt if prompt_style == "full" else render_compact_prompt,
            check_admissible=True,
        )
        self._engine = None
        self._clear_episode()

    def _clear_episode(self) -> None:
        """No game loaded yet: the episode's state empty."""
        self._state: EngineState | None = None
        self._trace: list[tuple[str, EngineState]] = []
        self._tracker: ExpertTracker | None = None
        self._start: EngineState | None = None
        self.gamefile: str | None = None
        self.traj: dict[str, Any] = {}
        self.task = ""
        self.task_type = ""
        self.steps = 0
        self.done = False
        self.won = False
        self._anchor = ""
        self.last_info: dict[str, Any] = {}

    @staticmethod
    def _check_args(max_steps: int, prompt_style: str, notes: bool, expert: str, val_seed_base: int) -> None:
        """Raise ``ValueError`` for a constructor argument out of its range or a combination that
        does not go together."""
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style={prompt_style!r} is not valid; valid: {', '.join(PROMPT_STYLES)}")
        if notes and prompt_style != "compact":
            raise ValueError("notes=true needs prompt_style=compact (the reference prompt is verl-agent's, word for word)")
        if expert not in EXPERT_MODES:
            raise ValueError(f"expert={expert!r} is not valid; valid: {', '.join(EXPERT_MODES)}")
        if int(val_seed_base) < 1:
            raise ValueError(f"val_seed_base must be >= 1, got {val_seed_base}")

    def _find_sources(
        self, data_source: str, data_path: str | None, games: str | list[str] | None, val_games: str | list[str] | None,
    ) -> None:
        """Where the games come from: ``source`` and ``data_root`` (the official tree checked), and
        with the user's own ``games`` their files per ``train`` / ``val`` (``files``)."""
        if val_games and not games:
            raise ValueError("val_games needs games (the training games) as well")
        self.source, self.data_root = ("files", None) if games else resolve_source(data_source, data_path)
        self.files: dict[str, tuple[Path, ...]] = {}
        if games:
            self.files = {"train": find_games(games, self.task_types)}
            self.files["val"] = find_games(val_games, self.task_types) if val_games else self.files["train"]
        if self.source == "official":
            check_official_root(self.data_root)

    # --- games -----------------------------------------------------------------------------
    def _num_games(self, num_games) -> dict[str, int | None]:
        if num_games is None:
            sizes: dict[str, int | None] = dict(DEFAULT_NUM_GAMES) if self.source == "generated" else {}
        elif isinstance(num_games, Mapping):
            sizes = {canonical_split(k): int(v) for k, v in num_games.items()}
            if self.source == "generated":
                sizes = {**DEFAULT_NUM_GAMES, **sizes}
        else:
            sizes = {s: int(num_games) for s in ("train", "valid_seen", "valid_unseen")}
        for split, n in sizes.items():
            if n is not None and n < 1:
                raise ValueError(f"num_games[{split}] must be >= 1, got {n}")
        return sizes

    def split_and_index(self, seed: int) -> tuple[str, int]:
        """(split, game index before wrapping) of ``reset(seed)``."""
        seed = int(seed)
        if seed < 0:
            raise ValueError(f"seeds are non-negative, got {seed}")
        if seed >= self.val_seed_base:
            return self.val_split, seed - self.val_seed_base
        return self.split, seed

    def official_games(self, split: str) -> tuple[Path, ...]:
        """The sorted, filtered official games of ``split`` (capped by ``num_games``)."""
        games = discover_games(self.data_root, split, self.task_types)
        cap = self.num_games.get(split)
        games = games[:cap] if cap else games
        if not games:
            raise FileNotFoundError(
                f"no ALFWorld games of types {list(self.task_types)} in {self.data_root}/json_2.1.1/{split}"
            )
        return games

    def generator_index(self, position: int) -> int:
        """Generator game index of pool position ``position`` (only the requested task types)."""
        types = self.task_types
        return (position // len(types)) * len(TASK_TYPES) + TASK_TYPES.index(types[position % len(types)])

    def game_for_seed(self, seed: int) -> str:
        """Path of the ``game.tw-pddl`` that ``reset(seed)`` plays (generated on first use)."""
        split, index = self.split_and_index(seed)
        if self.source == "files":
            games = self.files["val" if int(seed) >= self.val_seed_base else "train"]
            return str(games[index % len(games)])
        if self.source == "official":
            games = self.official_games(split)
            return str(games[index % len(games)])
        pool = int(self.num_games[split])
        return str(ensure_game(split, self.generator_index(index % pool), self.generator))

    # --- TextEnv ---------------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        gamefile = self.game_for_seed(seed)
        if self._engine is None or self._engine.gamefile != gamefile:
            if self._engine is not None:
                release_engine(self._engine)
            self._engine = acquire_engine(gamefile, speedups=self.speedups)
        self._engine.load(gamefile)
        state = self._engine.reset()
        self.gamefile = gamefile
        self.traj = read_traj(gamefile)
        self.task_type = str(self.traj.get("task_type", ""))
        self.task = task_from_intro(state.feedback)
        self._notes = Notes(state.feedback, self.task) if self.notes else None
        self._state = self._start = state
        self._trace = []
        self._tracker = None
        self.steps = 0
        self.done = False
        self.won = bool(state.won)
        return state.feedback, self._info(state, admissible=True)

    def step(self, action: str) -> StepResult:
        if self._state is None or self._engine is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            return StepResult(self._state.feedback, 0.0, True, self._info(self._state, admissible=False))
        command = self._command(action)
        admissible = command in self._admissible(self._state)
        state = self._engine.step(command)
        self._trace.append((command, state))
        self._state = state
        if self._notes is not None:
            self._notes.update(state.feedback)
        self.steps += 1
        reward = WIN_REWARD if state.won and not self.won else 0.0
        self.won = self.won or bool(state.won)
        self.done = self.won or self.steps >= self.max_steps
        keep_anchor = not admissible and self.noop_anchor == "state"
        return StepResult(state.feedback, reward, self.done, self._info(state, admissible, keep_anchor=keep_anchor))

    def close(self) -> None:
        if self._engine is not None:
            release_engine(self._engine)
        self._engine = None
        self._state = None
        self._trace = []
        self._tracker = None

    # --- expert ----------------------------------------------------------------------------
    def expert_command(self) -> str:
        """The expert's next command for the current state (see :mod:`arl.envs.alfworld.expert`)."""
        if self._state is None or self._engine is None:
            raise RuntimeError("reset the environment before asking for the expert")
        if self._tracker is None:
            self._tracker = ExpertTracker(self.traj, mode=self.expert_mode)
            self._tracker.start(self._start)
        return self._tracker.command(self._engine, self._trace, self._admissible(self._state))

    # --- internals -------------------------------------------------------------------------
    @staticmethod
    def _admissible(state: EngineState) -> list[str]:
        return [c for c in state.admissible_commands if c != "help"]

    def _command(self, action: Any) -> str:
        """The command to send for ``action``: its admissible spelling when it matches one
        (case and white space insensitive), else the text itself, cut to a sane length."""
        if not isinstance(action, str):
            return INVALID_ACTION
        text = " ".join(action.split()).lower()
        for command in self._admissible(self._state):
            if command.lower() == text:
                return command
        cleaned = "".join(ch if ch.isprintable() else " " for ch in action[:MAX_COMMAND_CHARS]).strip()
        return cleaned if cleaned and cleaned != "help" else INVALID_ACTION

    def _info(self, state: EngineState, admissible: bool, keep_anchor: bool = False) -> dict[str, Any]:
        """The step's ``info``; ``keep_anchor``: the anchor stays the last one (the state did not change)."""
        actions = self._admissible(state)
        if not keep_anchor:
            self._anchor = state.feedback + "\n" + "|".join(sorted(actions))
        info = {
            "task": self.task,
            "task_type": self.task_type,
            "admissible_actions": actions,
            "won": self.won,
            "score": 1.0 if self.won else 0.0,
            "anchor": self._anchor,
            "steps": self.steps,
            "gamefile": self.gamefile,
            "action_is_admissible": admissible,
        }
        if self._notes is not None:
            info["notes"] = self._notes.render()
        self.last_info = info
        return info
