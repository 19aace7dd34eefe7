"""Expert for behaviour cloning: alfworld's handcoded expert, with fast-downward as a fallback.

:class:`ExpertTracker` runs alfworld's ``HandCodedTWAgent`` alongside an episode exactly as
alfworld's ``AlfredExpert`` wrapper does (it observes the intro at reset, answers ``look`` first,
then computes its next command after every step from the feedback, the admissible commands and the
engine's facts), but lazily: the env records its steps and the tracker replays the ones it has not
seen only when an expert command is asked for, so RL rollouts pay nothing for it. The handcoded
agent draws from Python's global ``random`` for tie-breaks; each of its calls runs under a seed of
(task id, step) and restores the global random state afterwards, so the expert is deterministic.

If the handcoded agent gives up (its own timeout or failure) or proposes an inadmissible command,
the tracker switches to fast-downward's plan from the current state (the ``planner`` expert of
ALFWorld) for the rest of the episode. ``mode="planner"`` uses the planner from the first step.

:func:`expert_response` is the entry point of ``arl.agent.experts``.
"""

from __future__ import annotations

import random
from typing import Any

from arl.envs.alfworld.engine import EngineState, require_alfworld

EXPERT_MODES = ("handcoded", "planner")


def _task_params(traj: dict[str, Any], objects: list[str]) -> dict[str, Any]:
    """The handcoded agent's task parameters, as ``HandCodedAgent.reset`` builds them."""
    params = {**traj["pddl_params"], "task_type": traj["task_type"]}
    return {k: (v.lower() if v in objects else v) for k, v in params.items()}


class ExpertTracker:
    """alfworld's handcoded expert following one episode (see the module docstring).

    Args:
        traj: the game's ``traj_data.json`` content (``task_type``, ``pddl_params``, ``task_id``).
        mode: ``handcoded`` (default) or ``planner``.
        max_steps: the handcoded agent's own step budget (alfworld uses 200).
    """

    def __init__(self, traj: dict[str, Any], mode: str = "handcoded", max_steps: int = 200):
        if mode not in EXPERT_MODES:
            raise ValueError(f"expert mode {mode!r} is not valid; valid: {', '.join(EXPERT_MODES)}")
        mods = require_alfworld()
        self.mode = mode
        self.key = str(traj.get("task_id", traj["task_type"]))
        self._errors = (mods["handcoded_expert"].HandCodedAgentTimeout, mods["handcoded_expert"].HandCodedAgentFailed)
        self.agent = None
        self.fallback = mode == "planner"
        if not self.fallback:
            agent = mods["HandCodedTWAgent"](max_steps=max_steps)
            params = _task_params(traj, mods["constants"].OBJECTS)
            agent.task_params = params
            agent.policy = agent.get_task_policy(params)(params, max_steps=max_steps)
            self.agent = agent
        self.seen = 0  # steps of the episode replayed so far
        self.next_command: str | None = None

    def start(self, state: EngineState) -> None:
        """Observe the episode's intro; the first command is ``look`` (as alfworld's wrapper)."""
        if self.agent is not None:
            self._seeded(0, self.agent.observe, state.feedback)
        self.next_command = "look"
        self.seen = 0

    def catch_up(self, trace: list[tuple[str, EngineState]]) -> None:
        """Replay the (command, resulting state) steps of ``trace`` not seen yet."""
        while self.seen < len(trace):
            command, state = trace[self.seen]
            self.seen += 1
            if self.fallback or self.agent is None:
                continue
            try:
                nxt = self._seeded(self.seen, self.agent.act, state.raw, 0, state.won, command)
            except self._errors:
                nxt = None
            except Exception:  # noqa: BLE001 - the heuristics can trip on unusual text: fall back
                nxt = None
            if nxt is None or nxt not in state.admissible_commands:
                self.fallback = True
            self.next_command = nxt

    def command(self, engine, trace: list[tuple[str, EngineState]], admissible: list[str]) -> str:
        """The expert's next command for the engine's current state: one of ``admissible``
        (``look`` when the expert proposes something else, e.g. alfworld's random ``help``)."""
        self.catch_up(trace)
        if self.fallback:
            plan = engine.replan()
            command = plan[0] if plan else "look"
        else:
            command = self.next_command or "look"
        return command if command in admissible else "look"

    def _seeded(self, step: int, fn, *args):
        state = random.getstate()
        random.seed(f"arl-alfworld-expert/{self.key}/{step}")
        try:
            return fn(*args)
        finally:
            random.setstate(state)


def expert_think(command: str, task: str) -> str:
    """The brief thought written before an expert command."""
    verb = command.split(" ", 1)[0] if command else "look"
    reason = {
        "go": "search or reach the right place",
        "open": "look inside",
        "close": "tidy up",
        "take": "pick up what the task needs",
        "move": "place the object where the task wants it",
        "heat": "heat the object",
        "cool": "cool the object",
        "clean": "clean the object",
        "use": "turn on the light",
        "look": "look around",
        "examine": "check what is here",
    }.get(verb, "make progress")
    return f"Task: {task}. Next: {command} to {reason}."


def expert_command(env: Any) -> str:
    """The expert's next command for an ``AlfWorldEnv`` after ``reset`` (see the module docstring)."""
    return env.expert_command()


def expert_response(env: Any) -> str:
    """The expert's full answer to the env's current state: ``<think>...</think><action>...</action>``."""
    command = expert_command(env)
    task = (env.last_info or {}).get("task", "") if hasattr(env, "last_info") else ""
    return f"<think>{expert_think(command, task)}</think><action>{command}</action>"
