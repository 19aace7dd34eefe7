"""A gymnasium text environment trained with ARL through ``env=gym`` (docs/environments.md, "Bring your
own environment").

Hot or cold: a secret number 1-50 drawn from the reset seed; each guess is answered "warmer" or
"colder" (closer than the last guess or not); +1 and the end for the secret, -0.05 a guess, 8
guesses at most. Register it by importing this module (gymnasium's ``module:Name`` id does that):

    PYTHONPATH=examples python src/train.py env=gym env.kwargs.id=gym_hot_cold:HotCold-v0 \\
        env.kwargs.answer_hint="a number from 1 to 50" bc.enabled=false debug=smoke

Run directly, it plays one episode by bisection and prints it.
"""

from __future__ import annotations

import string
from typing import ClassVar

import gymnasium
from gymnasium import spaces


class HotCold(gymnasium.Env):
    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, max_guesses: int = 8):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=2, min_length=1, charset="0123456789")
        self.max_guesses = int(max_guesses)
        self.secret, self.guesses, self.last = 1, 0, None

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.secret, self.guesses, self.last = int(self.np_random.integers(1, 51)), 0, None
        return "No guess yet.", {"task": "Find the secret number from 1 to 50.", "task_type": "hot_cold"}

    def step(self, action: str):
        guess = int(action)
        if not 1 <= guess <= 50:
            raise ValueError(f"{guess} is outside 1-50")  # the adapter scores it as an invalid action
        self.guesses += 1
        won = guess == self.secret
        if won:
            hint = "right"
        elif self.last is None:
            hint = "not it"
        else:
            hint = "warmer" if abs(guess - self.secret) < abs(self.last - self.secret) else "colder"
        self.last = guess
        info = {"won": won, "anchor": f"{self.guesses}:{guess}:{hint}"}
        return f"{guess}: {hint}.", (1.0 if won else -0.05), won, not won and self.guesses >= self.max_guesses, info


gymnasium.register("HotCold-v0", entry_point=HotCold)


if __name__ == "__main__":
    from arl.envs.registry import make_env

    env = make_env("gym", id="gym_hot_cold:HotCold-v0", answer_hint="a number from 1 to 50")
    observation, info = env.reset(seed=7)
    print(info["task"], "|", observation)
    low, high = 1, 50
    while True:  # ternary probes would need the hint's direction; walk the range instead
        guess = (low + high) // 2
        result = env.step(str(guess))
        print(guess, "->", result.observation, result.reward)
        if result.done:
            print("won" if result.info["won"] else "lost")
            break
        low, high = (guess + 1, high) if env.env.unwrapped.secret > guess else (low, guess - 1)
