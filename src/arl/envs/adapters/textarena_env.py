"""``env=textarena``: a single-player TextArena game behind the env contract.

``TextArenaEnv(id="GuessTheNumber-v0")`` plays the game as one player, in its raw variant (``<id>-raw``:
the game's own messages, no observation wrapper) where TextArena's registry has one, else the id as
given (``GuessTheNumber-v0-train``, with that variant's wrappers; ``BabyAiText-v0``, registered without
variants):

- ``reset(seed)`` -> ``env.reset(num_players=1, seed=seed)``; the game's opening prompt (its rules and
  first state) becomes the task, shown at the top of every turn's prompt;
- ``step(action)`` -> ``env.step(action)``; the observation is the game's messages since (its answer
  to the move); at the end ``env.close()`` gives the reward, which the turn that ended the game
  receives: TextArena's single-player games score 1 for a solved game and, for a lost one, their
  completion (a fraction below 1: 2048's share of the target tile, Sudoku's of the cells), 0 or -1;
  so won is that reward reaching 1, never merely > 0;
- a move the game refuses (its invalid-move rule: a warning, then the loss once its allowance is spent)
  is marked ``info["invalid_action"]``, an invalid turn for the agent loop (the format penalty, the
  valid-action ratio); an answer that did not parse goes to the game as an empty move, which the game
  refuses the same way; never an ended run;
- randomness: TextArena seeds Python's global ``random`` at every reset and its games draw from it while
  they play (2048's new tiles). Each adapter keeps a private ``random`` state instead: the global state
  is saved before every call into the game and put back after, the game drawing from the episode's own
  stream (seeded by the task seed at reset). Two episodes of one seed play the same game whatever
  else runs in the process (group members stepped in turn, ``rollout.n_workers``), and the trainer's
  own ``random`` is never reseeded. (numpy's global generator is left alone: no single-player game
  draws from it.)
- the anchor (GiGPO's state key) is the game's state (``env.state.game_state``), not its message text,
  which repeats across states ("The target number is lower.").

Episode length: many games end themselves (a turn limit of their own, a loss); some have none (2048 ends
only at its target tile, a full board without a merge, or the second invalid move in a row), so
``max_turns`` is then the only bound of an episode.

Games that play offline here (their data ships with the package): ``GuessTheNumber-v0``,
``TowerOfHanoi-v0``, ``Minesweeper-v0-small``, ``FifteenPuzzle-v0``, ``FrozenLake-v0``, ``LightsOut-v0``,
``Sudoku-v0``, ``Blackjack-v0``, ``Bandit-v0``, ``Sokoban-v0``, ``PegJump-v0``, ``RushHour-v0``,
``Cryptarithm-v0``, ``LogicPuzzle-v0``, ``Crosswords-v0``, ``Secretary-v0``, ``2048-v0`` (each played a
step here, textarena 0.7.4). Games that fail for their own reasons: ``Klondike-v0`` and
``UltimateTexasHoldem-v0`` do not import (Klondike's module has a syntax error under any Python,
UltimateTexasHoldem's needs Python 3.12's f-strings);
``GuessWho-v0`` and ``TwentyQuestions-v0`` need an OpenRouter API key (``OPENROUTER_API_KEY``; an LLM
plays the other side); ``Wordle-v0``, ``Hangman-v0``, ``WordLadder-v0`` and ``WordSearch-v0`` need
NLTK's ``words`` corpus, downloaded at first use (offline they fail); ``BabyAiText-v0`` needs the
``gym`` and ``babyai_text`` packages, which the extra does not bring.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any, TypeVar

import textarena
from textarena.envs.registration import ENV_REGISTRY

from arl.envs.adapters import generic_prompt
from arl.envs.base import EnvSpec, StepResult

PLAYER = 0
WIN_REWARD = 1.0  # TextArena's single-player reward of a solved game; a lost one scores its completion, below it
CONSTRUCTION_SEED = 0  # the private random stream a game is constructed with (before its first reset)

T = TypeVar("T")


def registered_variant(game_id: str) -> str:
    """The id to make for ``game_id``: its raw variant where TextArena's registry has one (or ``game_id``
    is one already), else ``game_id`` as given."""
    if game_id.endswith("-raw"):
        return game_id
    raw = f"{game_id}-raw"
    return raw if raw in ENV_REGISTRY else game_id


def _messages(observation: Any) -> str:
    """The game's messages of a raw observation (a list of (sender, text, type)), the player's own
    move left out."""
    if isinstance(observation, str):
        return observation
    return "\n".join(str(text) for sender, text, *_ in observation if sender != PLAYER)


def refused_move(state: Any, done: bool, game_info: dict | None = None) -> bool:
    """Whether the game refused the move it just took: a warning (``error_count`` stays above 0 only
    after a refused move; a valid one resets it) or, at the end, the loss of a spent allowance
    (``game_info[0]["invalid_move"]``)."""
    if done:
        return bool(((game_info or {}).get(PLAYER) or {}).get("invalid_move", False))
    return int(getattr(state, "error_count", 0) or 0) > 0


class TextArenaEnv:
    """A single-player TextArena game (module docstring).

    Args:
        id: the game's id (``GuessTheNumber-v0``); its raw variant is played where there is one.
        max_turns: turns per episode (the game may end sooner).
        answer_hint: what goes between the action tags, for the prompt.
    """

    def __init__(self, id: str, max_turns: int = 20, answer_hint: str = "your move, e.g. [5]"):
        self.id = str(id)
        self._random = random.Random(CONSTRUCTION_SEED).getstate()  # the game's own random stream
        self.env = self._in_game(lambda: textarena.make(registered_variant(self.id)))
        self.spec = EnvSpec(
            name="textarena", max_turns=int(max_turns), invalid_action="",
            render_prompt=generic_prompt("", answer_hint), check_admissible=False,
        )
        self._task = ""
        self._done = False

    def _in_game(self, call: Callable[[], T]) -> T:
        """``call()`` with Python's global ``random`` set to this game's private state, which is kept for
        the next call; the global state is put back whatever happens."""
        outer = random.getstate()
        random.setstate(self._random)
        try:
            return call()
        finally:
            self._random = random.getstate()
            random.setstate(outer)

    def _info(self, won: bool = False, reward: float = 0.0, invalid: bool = False) -> dict[str, Any]:
        state = getattr(getattr(self.env, "state", None), "game_state", None)
        anchor = json.dumps(state, sort_keys=True, default=str) if state is not None else ""
        return {"task": self._task, "task_type": self.id, "admissible_actions": None, "won": bool(won),
                "score": 1.0 if won else 0.0, "anchor": anchor, "game_reward": float(reward),
                "invalid_action": bool(invalid)}

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self._random = random.Random(int(seed)).getstate()  # draws before the game seeds itself follow the task too
        self._in_game(lambda: self.env.reset(num_players=1, seed=int(seed)))
        _, observation = self._in_game(self.env.get_observation)
        self._task = _messages(observation)
        self._done = False
        return "(the game has just started)", self._info()

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("step after the game ended")
        done, _ = self._in_game(lambda: self.env.step(str(action)))
        _, observation = self._in_game(self.env.get_observation)
        text = _messages(observation)
        if not done:
            return StepResult(text, 0.0, False, self._info(invalid=refused_move(self.env.state, False)))
        self._done = True
        rewards, game_info = self._in_game(self.env.close)
        reward = float((rewards or {}).get(PLAYER, 0.0))
        info = self._info(won=reward >= WIN_REWARD, reward=reward, invalid=refused_move(self.env.state, True, game_info))
        info["reason"] = str((game_info or {}).get(PLAYER, {}).get("reason", ""))
        return StepResult(text, reward, True, info)

    def close(self) -> None:
        if not self._done:
            try:
                self._in_game(self.env.close)
            except Exception:  # noqa: BLE001, S110 - a game closed mid-episode may complain; nothing to keep
                pass
