"""A gymnasium text environment registered for the adapter's tests (``env=gym
env.kwargs.id=ecosystem_envs:GuessDigit-v0``): guess a digit 1-9 drawn from the reset seed, told
"higher" or "lower" after each guess; +1 and the end for the right one, -0.1 a wrong one. Its action
space is text over the digits, so anything else is rejected by the adapter as an invalid action."""

from __future__ import annotations

import string
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
