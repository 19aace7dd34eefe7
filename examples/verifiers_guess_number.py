"""A multi-turn verifiers environment (verifiers 0.4, ``verifiers.v1``): guess the number, the environment's own
code answering every guess. ARL trains on it through ``env=verifiers`` (the ``ecosystem`` extra):

    PYTHONPATH=examples python src/train.py env=verifiers env.kwargs.id=verifiers_guess_number env.kwargs.won_reward=won bc.enabled=false debug=smoke

A verifiers environment is a taskset package, found by its id (this module's name): it exports, in
``__all__``, a ``Taskset`` (where the tasks come from) and, for a multi-turn game, an ``Env`` whose ``run``
drives the conversation: ``interaction.turn()`` lets the agent answer the task, ``interaction.turn(text)``
sends the environment's reply and waits for the next answer, and the rewards recorded on the trace are the
rubric ARL trains on. Any such package works the same way, from a file on ``PYTHONPATH`` or installed from
the Environments Hub.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator

import verifiers.v1 as vf

NUMBER = re.compile(r"-?\d+")


class GuessData(vf.TaskData):
    info: dict
    """The secret number and the range it was drawn from."""


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    pass


class GuessConfig(vf.TasksetConfig):
    high: int = 20
    """Secrets are drawn from 1..high."""


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=6)
    """The guesser; its ``max_turns`` is the number of guesses."""


def hint(reply: str, secret: int) -> tuple[str, int | None]:
    """The environment's answer to ``reply`` and the number it read (None: no number in it)."""
    found = NUMBER.search(reply or "")
    if found is None:
        return "Answer with one number.", None
    guess = int(found.group())
    if guess == secret:
        return "Correct!", guess
    return ("Higher." if guess < secret else "Lower."), guess


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        secret, high = task.data.info["secret"], task.data.info["high"]
        guess = None
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                answer, read = hint(segment.last_reply, secret)
                guess = read if read is not None else guess
                if read == secret:
                    break
                segment = await interaction.turn(answer)
        trace = interaction.trace
        trace.record_reward("won", float(guess == secret), 1.0)
        closeness = 0.0 if guess is None else max(0.0, 1.0 - abs(guess - secret) / high)
        trace.record_reward("closeness", closeness, 0.2)


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    INFINITE = True

    def load(self) -> Iterator[GuessTask]:
        for i in itertools.count():
            secret = random.Random(i).randint(1, self.config.high)
            prompt = (f"I am thinking of a whole number from 1 to {self.config.high}. Guess it: answer with one "
                      "number, and I will say higher or lower.")
            yield GuessTask(GuessData(name=f"guess#{i}", prompt=prompt,
                                      info={"secret": secret, "high": self.config.high}), self.config.task)


__all__ = ["GuessEnv", "GuessTaskset"]
