"""An OpenEnv environment server trained with ARL through ``env=openenv`` (docs/environments.md, "Bring your own
environment"), written with openenv-core's own server primitives: an ``Environment`` with pydantic ``Action`` and
``Observation`` models, served by ``create_app``.

Higher or lower: a secret number from 1 to 50 drawn from the reset seed; each guess is answered "too low",
"too high" or "right"; +1 and the end for the secret, -0.05 a wrong guess, 6 guesses (enough for bisection).
A guess outside 1-50, or not a number, fails the action's validation: the server rejects it (an invalid turn
for ARL, the game unchanged). Won is the observation's ``won`` field (and its metadata's).

ARL serves the app itself, in each process of envs (``env.kwargs.app``):

    PYTHONPATH=examples python src/train.py env=openenv env.kwargs.app=openenv_guess_number:app \\
        "env.kwargs.answer_hint=a number from 1 to 50" bc.enabled=false debug=smoke

or trains against it running on its own (``env.kwargs.url``):

    python examples/openenv_guess_number.py --port 8000
    python src/train.py env=openenv env.kwargs.url=http://127.0.0.1:8000 bc.enabled=false debug=smoke
"""

from __future__ import annotations

import argparse
import random
import uuid
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from pydantic import Field

LOW, HIGH, MAX_GUESSES = 1, 50, 6
WIN_REWARD, GUESS_REWARD = 1.0, -0.05
TASK = (f"Find the secret number from {LOW} to {HIGH} in {MAX_GUESSES} guesses. After each guess you are told "
        "whether the secret is higher or lower.")


class GuessAction(Action):
    """One guess."""

    guess: int = Field(ge=LOW, le=HIGH, description=f"a number from {LOW} to {HIGH}")


class GuessObservation(Observation):
    """The game's answer to the last guess."""

    message: str = Field(description="the answer, as text")
    task: str = Field(default=TASK, description="the rules")
    guesses_left: int = Field(ge=0)
    won: bool = False


class GuessNumberEnvironment(Environment[GuessAction, GuessObservation, State]):
    """Higher or lower on 1-50, the secret drawn from the reset seed; one instance a session."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # no state shared between instances

    def __init__(self):
        super().__init__()
        self.secret, self.guesses_left, self.done = LOW, MAX_GUESSES, False
        self._state = State(episode_id=None, step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self.secret = random.Random(seed).randint(LOW, HIGH)
        self.guesses_left, self.done = MAX_GUESSES, False
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return GuessObservation(message=f"No guess yet. {MAX_GUESSES} guesses left.", guesses_left=MAX_GUESSES)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        if self.done:
            raise RuntimeError("the game is over: reset first")
        self._state.step_count += 1
        self.guesses_left -= 1
        guess = action.guess
        won = guess == self.secret
        self.done = won or self.guesses_left == 0
        if won:
            message = f"{guess} is right!"
        else:
            message = f"{guess} is too {'low' if guess < self.secret else 'high'}."
            message += f" {self.guesses_left} guesses left." if self.guesses_left else f" No guesses left: it was {self.secret}."
        return GuessObservation(message=message, guesses_left=self.guesses_left, won=won, done=self.done,
                                reward=WIN_REWARD if won else GUESS_REWARD, metadata={"won": won})

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessNumberEnvironment, GuessAction, GuessObservation, env_name="guess_number",
                 max_concurrent_envs=256)


if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description="Serve the higher-or-lower OpenEnv environment.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
