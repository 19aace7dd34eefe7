"""Where the agent stands in an ALFWorld episode, kept from its own observations (``notes``).

A small policy that sees a few past actions cannot tell which places it has already searched, so
it walks back to them; the reference prompt leaves that memory to the model's context. With
``env.kwargs.notes=true`` the compact prompt carries these lines instead, written from what the
agent itself was told (the intro and every feedback text), never from the engine's hidden state::

    At: countertop 3. Holding: apple 1.
    Not visited: cabinet 8, cabinet 7, drawer 1.
    Seen: apple 2 (countertop 3), mug 1 (cabinet 2).

- ``At``: the receptacle of the last ``You arrive at X``; ``nowhere`` before the first.
- ``Holding``: the object of the last ``You pick up the O``; ``nothing`` after ``You move/put``.
- ``Not visited``: the intro's receptacles (in the intro's order) the agent has not arrived at.
- ``Seen``: the objects whose class the task names, with where they were last seen (a picked-up
  object leaves the list, a moved one is seen where it was put), in the order first seen.

:class:`Notes` is updated with each feedback text; :meth:`Notes.render` gives the lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_THING = re.compile(r"\ban? ([a-z]+ \d+)")
_ARRIVE = re.compile(r"You arrive at ([a-z]+ \d+)")
_PICK = re.compile(r"You pick up the ([a-z]+ \d+) from the ([a-z]+ \d+)")
_PUT = re.compile(r"You (?:move|put) the ([a-z]+ \d+) (?:to|in/on|in|on) the ([a-z]+ \d+)")
_SEE = re.compile(r"you see (.*)", re.IGNORECASE | re.DOTALL)


def things(text: str) -> list[str]:
    """``"a apple 1, and a spoon 1."`` -> ``["apple 1", "spoon 1"]`` (names with their number)."""
    return _THING.findall(text)


@dataclass
class Notes:
    """The agent's memory of one episode (see the module docstring).

    Args:
        intro: the episode's first observation (its ``you see`` list names the receptacles).
        task: the goal text; objects whose class is one of its words are kept in ``Seen``.
    """

    intro: str
    task: str
    at: str | None = None
    holding: str | None = None
    receptacles: list[str] = field(default_factory=list)
    visited: set[str] = field(default_factory=set)
    seen: dict[str, str] = field(default_factory=dict)  # object -> receptacle, in first-seen order

    def __post_init__(self) -> None:
        seen = _SEE.search(self.intro.split("Your task is to:")[0])
        self.receptacles = things(seen.group(1)) if seen else []
        self._task_words = set(re.findall(r"[a-z]+", self.task.lower()))

    def update(self, feedback: str) -> None:
        """Take in one step's feedback (``Nothing happens.`` changes nothing)."""
        arrive = _ARRIVE.search(feedback)
        if arrive:
            self.at = arrive.group(1)
            self.visited.add(self.at)
        pick = _PICK.search(feedback)
        if pick:
            self.holding = pick.group(1)
            self.seen.pop(pick.group(1), None)
        put = _PUT.search(feedback)
        if put:
            self.holding = None
            self._see(put.group(1), put.group(2))
        look = _SEE.search(feedback)
        if look and self.at is not None:
            for thing in things(look.group(1)):
                self._see(thing, self.at)

    def _see(self, thing: str, where: str) -> None:
        if thing.split()[0] in self._task_words and thing not in self.receptacles:
            self.seen[thing] = where

    def render(self) -> str:
        """The notes as prompt lines."""
        left = [r for r in self.receptacles if r not in self.visited]
        seen = ", ".join(f"{o} ({r})" for o, r in self.seen.items())
        return "\n".join([
            f"At: {self.at or 'nowhere'}. Holding: {self.holding or 'nothing'}.",
            f"Not visited: {', '.join(left) if left else 'none'}.",
            f"Seen: {seen or 'nothing yet'}.",
        ])
