"""``env=textarena``: a single-player TextArena game behind the env contract.

``TextArenaEnv(id="GuessTheNumber-v0")`` plays the raw variant of the game (``<id>-raw``: the game's
own messages, no observation wrapper) as one player:

- ``reset(seed)`` -> ``env.reset(num_players=1, seed=seed)``; the game's opening prompt (its rules and
  first state) becomes the task, shown at the top of every turn's prompt;
- ``step(action)`` -> ``env.step(action)``; the observation is the game's messages since (its answer
  to the move); at the end ``env.close()`` gives the reward (the player's: 1 a win, -1 a loss, as the
  game scores), which the turn that ended the game receives; won: that reward > 0;
- an answer that did not parse goes to the game as an empty move: the game's own rule for an invalid
  move applies (a warning, then the loss once its allowance is spent), never an ended run;
- the anchor (GiGPO's state key) is the game's state (``env.state.game_state``), not its message text,
  which repeats across states ("The target number is lower.").

Games that play offline here (their data ships with the package): ``GuessTheNumber-v0``,
``TowerOfHanoi-v0``, ``Minesweeper-v0-small``, ``FifteenPuzzle-v0``, ``FrozenLake-v0``, ``LightsOut-v0``,
``Sudoku-v0``, ``Blackjack-v0``, ``Bandit-v0``, ``Sokoban-v0``, ``PegJump-v0``, ``RushHour-v0``,
``Cryptarithm-v0``, ``LogicPuzzle-v0``, ``Crosswords-v0``, ``Secretary-v0`` (each played a step here,
December 2026, textarena 0.7.4). ``Wordle`` and ``Hangman`` need NLTK corpora downloaded at first use
and fail offline.
"""

from __future__ import annotations

import json
from typing import Any

import textarena

from arl.envs.adapters import generic_prompt
from arl.envs.base import EnvSpec, StepResult

PLAYER = 0


def _messages(observation: Any) -> str:
    """The game's messages of a raw observation (a list of (sender, text, type)), the player's own
    move left out."""
    if isinstance(observation, str):
        return observation
    return "\n".join(str(text) for sender, text, *_ in observation if sender != PLAYER)


class TextArenaEnv:
    """A single-player TextArena game (module docstring).

    Args:
        id: the game's id (``GuessTheNumber-v0``); its raw variant is played.
        max_turns: turns per episode (the game may end sooner).
        answer_hint: what goes between the action tags, for the prompt.
    """

    def __init__(self, id: str, max_turns: int = 20, answer_hint: str = "your move, e.g. [5]"):
        self.id = str(id)
        raw = self.id if self.id.endswith("-raw") else f"{self.id}-raw"
        self.env = textarena.make(raw)
        self.spec = EnvSpec(
            name="textarena", max_turns=int(max_turns), invalid_action="",
            render_prompt=generic_prompt("", answer_hint), check_admissible=False,
        )
        self._task = ""
        self._done = False

    def _info(self, won: bool = False, reward: float = 0.0) -> dict[str, Any]:
        state = getattr(getattr(self.env, "state", None), "game_state", None)
        anchor = json.dumps(state, sort_keys=True, default=str) if state is not None else ""
        return {"task": self._task, "task_type": self.id, "admissible_actions": None, "won": bool(won),
                "score": 1.0 if won else 0.0, "anchor": anchor, "game_reward": float(reward)}

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.env.reset(num_players=1, seed=int(seed))
        _, observation = self.env.get_observation()
        self._task = _messages(observation)
        self._done = False
        return "(the game has just started)", self._info()

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("step after the game ended")
        done, _ = self.env.step(str(action))
        _, observation = self.env.get_observation()
        text = _messages(observation)
        if not done:
            return StepResult(text, 0.0, False, self._info())
        self._done = True
        rewards, game_info = self.env.close()
        reward = float((rewards or {}).get(PLAYER, 0.0))
        info = self._info(won=reward > 0, reward=reward)
        info["reason"] = str((game_info or {}).get(PLAYER, {}).get("reason", ""))
        return StepResult(text, reward, True, info)

    def close(self) -> None:
        if not self._done:
            try:
                self.env.close()
            except Exception:  # noqa: BLE001, S110 - a game closed mid-episode may complain; nothing to keep
                pass
