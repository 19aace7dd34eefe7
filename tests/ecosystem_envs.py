"""A gymnasium text environment registered for the adapter's tests (``env=gym
env.kwargs.id=ecosystem_envs:GuessDigit-v0``): guess a digit 1-9 drawn from the reset seed, told
"higher" or "lower" after each guess; +1 and the end for the right one, -0.1 a wrong one. Its action
space is text over the digits, so anything else is rejected by the adapter as an invalid action.

Below it, the hostile ones of ``tests/integration/test_ecosystem_hostile.py``: a ``Text`` action space with
gymnasium's default charset, a ``Discrete`` one, a ``Box`` one, a step that hangs, an env that refuses
actions itself through ``info["invalid_action"]``."""

from __future__ import annotations

import string
import time
from typing import ClassVar

import gymnasium
from gymnasium import spaces


class GuessDigit(gymnasium.Env):
    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, max_guesses: int = 5):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=1, min_length=1, charset="123456789")
        self.max_guesses = int(max_guesses)
        self.target = 1
        self.guesses = 0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.target = int(self.np_random.integers(1, 10))
        self.guesses = 0
        return "Guess a digit from 1 to 9.", {"task": "Guess the hidden digit (1-9) in few guesses.",
                                              "task_type": "guess_digit", "admissible_actions": None}

    def step(self, action: str):
        self.guesses += 1
        guess = int(action)
        won = guess == self.target
        hint = "right" if won else ("higher" if guess < self.target else "lower")
        info = {"won": won, "anchor": f"guesses={self.guesses} last={guess}:{hint}"}
        truncated = not won and self.guesses >= self.max_guesses
        return f"{guess} is {hint}.", (1.0 if won else -0.1), won, truncated, info


gymnasium.register("GuessDigit-v0", entry_point=GuessDigit)


# ---------------------------------------------------------------- hostile gymnasium envs (tests/integration/test_ecosystem_hostile.py)
class Notebook(gymnasium.Env):
    """Write the note "open the door": a ``Text`` action space with gymnasium's default charset (letters
    and digits, no space), which the env never checks; +1 and the end for the note, 0 for anything else."""

    metadata: ClassVar[dict] = {"render_modes": []}
    NOTE = "open the door"

    def __init__(self):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=40)  # the default charset: the author set none
        self.notes: list[str] = []

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.notes = []
        return "An empty page.", {"task": f"Write the note {self.NOTE!r}.", "task_type": "notebook"}

    def step(self, action: str):
        self.notes.append(action)
        won = action == self.NOTE
        return f"The page reads: {action}", float(won), won, False, {"won": won}


class PickDoor(gymnasium.Env):
    """Pick one of doors 1-3 (``Discrete(3, start=1)``); the seed hides the prize behind one."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Discrete(3, start=1)
        self.prize = 1
        self.picked: list = []

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.prize = int(self.np_random.integers(1, 4))
        self.picked = []
        return "Three doors: 1, 2, 3.", {"task_type": "pick_door"}

    def step(self, action):
        self.picked.append(action)
        won = int(action) == self.prize
        return f"Door {action}: {'the prize' if won else 'nothing'}.", float(won), True, False, {"won": won}


class Joystick(gymnasium.Env):
    """A continuous (``Box``) action space, which a text policy cannot drive."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self):
        import numpy as np

        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        return "Steer.", {}

    def step(self, action):
        return "Steered.", 0.0, True, False, {}


class Stall(gymnasium.Env):
    """Count to 3 with "go"; on an odd seed the first step hangs (a step past the env pool's timeout)."""

    metadata: ClassVar[dict] = {"render_modes": []}
    HANG_SECONDS = 60.0

    def __init__(self):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=10)
        self.seed = 0
        self.count = 0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.seed, self.count = int(seed or 0), 0
        return "count=0", {"task": "Say go three times.", "task_type": "stall"}

    def step(self, action: str):
        self.count += 1  # the state moves before the hang: an interrupted step cannot be taken back
        if self.seed % 2 == 1:
            time.sleep(self.HANG_SECONDS)
        won = self.count >= 3
        return f"count={self.count}", float(won), won, False, {"won": won}


class Picky(gymnasium.Env):
    """Say "please": any other action is refused by the env itself (``info["invalid_action"]``) and costs
    -0.1; "please" wins."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=40)
        self.refused = 0

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.refused = 0
        return "Ask nicely.", {"task": "Ask nicely.", "task_type": "picky"}

    def step(self, action: str):
        polite = action.strip().lower() == "please"
        self.refused += not polite
        observation = "Granted." if polite else f"'{action}' is not how you ask."
        return observation, (1.0 if polite else -0.1), polite, False, {"won": polite, "invalid_action": not polite}


for _name, _cls in (("Notebook-v0", Notebook), ("PickDoor-v0", PickDoor), ("Joystick-v0", Joystick),
                    ("Stall-v0", Stall), ("Picky-v0", Picky)):
    gymnasium.register(_name, entry_point=_cls)
