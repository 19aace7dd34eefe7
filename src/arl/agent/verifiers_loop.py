"""Episodes of a verifiers environment, played by the policy through the recording gateway (``env=verifiers``).

A `verifiers <https://github.com/PrimeIntellect-ai/verifiers>`_ (0.4, ``verifiers.v1``) environment is a
taskset package: a module exporting a ``Taskset`` subclass and, for a multi-turn environment, an ``Env``
subclass whose ``run(task, agents)`` drives the conversation (``interaction.turn(text)`` answers the
agent's last reply) and records the rewards on the trace. :class:`VerifiersLoop` loads it by its taskset id
(``env.kwargs.id``: an importable module, or an installed Environments Hub package), and plays each episode
with verifiers' own machinery (``Env.run_episode``): the agents' harness (a tool-less chat program, ``null``,
unless the environment's config pins another) runs in a local subprocess and calls the model at the
episode's session of a :class:`~arl.agent.gateway.RecordingGateway`, which samples with the rollout engine
and records the exact prompt ids, sampled ids and log-probs of every call. So the verifiers environment's
code, its chat rendering and its rubric decide everything about the episode, and nothing is tokenised again.

- **Reward**: the environment's rubric, the weighted sum of the rewards recorded on the episode's traces
  (``Trace.reward``), on the last call. The episode is won when the rubric's reward ``won_reward`` scored
  above 0 (``""``: when the sum is above 0).
- **Tasks**: the taskset's first ``num_tasks`` tasks train (seed ``s`` plays task ``s % num_tasks``), the
  next ``num_val_tasks`` validate (seed ``VAL_SEED_BASE + i`` plays task ``num_tasks + i % num_val_tasks``),
  so a group's members play one task, and a validation seed the same task in every run.
- **Failures**: an episode verifiers marks not ``ok`` (an error in the env's hooks, a harness that failed, a
  deadline passed: ``timeout_s`` for the episode and again for its ``finalize``), one that made no call, is a
  failed episode (``env_error``), never a stalled rollout (an episode still running past both deadlines and a
  minute is cancelled).
- **Chat only**: the gateway takes system, user and assistant messages with text contents; an environment whose
  harness sends tool calls or tool messages gets HTTP 400 (a failed episode).
- **Turns**: each call of a trainable agent is a turn sample (the anchor hashes its last message, the env's
  reply). Every agent of the episode that uses the run's model plays with the policy, but the calls of one
  the environment marks not trainable (``agents.user.trainable = False``: a simulated user, a judge) are
  left out, as are its rewards: the gateway knows each call's agent by the trace id verifiers sends with it.
  With trajectory samples, the harness keeps its conversation, so an episode is one token stream.

The harness program is a PEP 723 script that verifiers prepares with ``uv`` (its environment built once,
from the package index, and cached); ``uv`` comes with the ``ecosystem`` extra, and the loop puts this
interpreter's ``bin`` folder on ``PATH`` so it is found.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from verifiers.v1.clients import EvalClientConfig, ModelContext
from verifiers.v1.configs.agent import agent_config_fields
from verifiers.v1.utils.loaders import env_config_type, load_environment, resolve_env_config

from arl.agent.gateway import RecordingGateway
from arl.agent.loop import Task
from arl.agent.programs import GatewayLoop
from arl.agent.records import Episode
from arl.envs.base import VAL_SEED_BASE
from arl.envs.registry import VERIFIERS_ENV
from arl.rollout.engine import RolloutEngine

#: the environment variable whose value the harness sends as its API key (the gateway does not check it)
API_KEY_VARIABLE = "ARL_GATEWAY_API_KEY"
#: where an agent role's harness runs unless ``env_args`` says otherwise: a local subprocess, since the
#: gateway listens on localhost (verifiers' default is a remote sandbox)
LOCAL_RUNTIME = {"type": "subprocess"}
#: the harness of a role whose environment pins none: the tool-less chat program (verifiers' default for a
#: taskset without its own harness is a shell agent)
CHAT_HARNESS = {"id": "null"}


def env_config(taskset_id: str, env_id: str = "", taskset_args: dict[str, Any] | None = None,
               env_args: dict[str, Any] | None = None):
    """The verifiers ``EnvConfig`` of taskset ``taskset_id`` (its package's ``Env``, else ``env_id``'s), each
    agent role local (:data:`LOCAL_RUNTIME`; :data:`CHAT_HARNESS` where the environment pins no harness)
    under what ``env_args`` sets for it."""
    env_args = dict(env_args or {})
    roles = agent_config_fields(env_config_type(taskset_id, env_id).model_construct())
    for role, declared in roles.items():
        defaults = {"runtime": LOCAL_RUNTIME} | ({"harness": CHAT_HARNESS} if declared.harness is None else {})
        env_args[role] = defaults | dict(env_args.get(role) or {})
    return resolve_env_config({"id": env_id, "taskset": {"id": taskset_id, **(taskset_args or {})}, **env_args})


@dataclass(frozen=True)
class VerifiersSettings:
    """``env=verifiers``'s keys (``env.kwargs``, configs/env/verifiers.yaml)."""

    id: str
    """The taskset: an importable module exporting a verifiers ``Taskset`` (and its ``Env``), or a Hub package."""
    env_id: str = ""
    """An environment to pair with the taskset instead ("": the taskset's own)."""
    taskset_args: dict[str, Any] = field(default_factory=dict)
    """The taskset's config fields."""
    env_args: dict[str, Any] = field(default_factory=dict)
    """The environment's config fields, its agent roles' included (``{"player": {"max_turns": 8}}``)."""
    num_tasks: int = 1000
    """Tasks that train (the taskset's first)."""
    num_val_tasks: int = 100
    """Tasks that validate (the next ones)."""
    task_type: str = ""
    """The episodes' task type ("": the taskset id)."""
    won_reward: str = ""
    """The rubric's reward whose score above 0 means the episode was won ("": the sum above 0)."""
    timeout_s: float = 300.0
    """Seconds an episode may take (verifiers' episode deadline; a failed episode past it)."""
    max_concurrency: int = 64
    """Episodes played at once."""


class VerifiersLoop(GatewayLoop):
    """Rollouts of a verifiers environment (module docstring).

    Args:
        engine: the rollout engine the gateway serves.
        tokenizer: the policy's tokenizer (its chat template renders the messages).
        **kwargs: the fields of :class:`VerifiersSettings` (``env.kwargs``).
    """

    def __init__(self, engine: RolloutEngine, tokenizer, **kwargs: Any):
        settings = VerifiersSettings(**kwargs)
        if not settings.id:
            raise ValueError("env=verifiers needs env.kwargs.id: the taskset's module (or Hub package)")
        super().__init__(engine, tokenizer, VERIFIERS_ENV, settings.task_type or settings.id, settings.timeout_s,
                         settings.max_concurrency)
        if settings.num_tasks < 1 or settings.num_val_tasks < 1:
            raise ValueError(f"env=verifiers needs at least one task to train and one to validate; got "
                             f"num_tasks={settings.num_tasks}, num_val_tasks={settings.num_val_tasks}")
        # verifiers' deadlines for the episode and its finalize(), under any the env_args set
        deadlines = {"episode": self.timeout_s, "finalize": self.timeout_s} | dict(settings.env_args.get("timeout") or {})
        config = env_config(settings.id, settings.env_id, settings.taskset_args,
                            {**settings.env_args, "timeout": deadlines})
        self.env = load_environment(config)
        wanted = settings.num_tasks + settings.num_val_tasks
        tasks = list(islice(iter(self.env.taskset), wanted))
        if len(tasks) < wanted:
            raise ValueError(f"verifiers taskset {settings.id!r} has {len(tasks)} tasks; env.kwargs.num_tasks="
                             f"{settings.num_tasks} and num_val_tasks={settings.num_val_tasks} ask for {wanted}")
        self.train_tasks, self.val_tasks = tasks[:settings.num_tasks], tasks[settings.num_tasks:]
        self.won_reward = settings.won_reward
        os.environ.setdefault(API_KEY_VARIABLE, "arl")
        if shutil.which("uv") is None and (Path(sys.executable).parent / "uv").exists():  # found last, shadows nothing
            os.environ["PATH"] = f"{os.environ.get('PATH', '')}{os.pathsep}{Path(sys.executable).parent}"

    def task_of(self, seed: int):
        """The verifiers task that seed ``seed`` plays (module docstring)."""
        if seed >= VAL_SEED_BASE:
            return self.val_tasks[(seed - VAL_SEED_BASE) % len(self.val_tasks)]
        return self.train_tasks[seed % len(self.train_tasks)]

    def _play_all(self, gateway: RecordingGateway, slots: list[tuple[Task, int, int]]) -> list[Episode]:
        """Every episode in one event loop, inside the environment's serving resources."""

        async def play_all() -> list[Episode]:
            gate = asyncio.Semaphore(max(1, self.max_concurrency))
            async with self.env.serving():
                return list(await asyncio.gather(*(self._play(gateway, gate, *slot) for slot in slots)))

        return asyncio.run(play_all())

    async def _play(self, gateway: RecordingGateway, gate: asyncio.Semaphore, task: Task, member: int,
                    episode_id: int) -> Episode:
        sid = gateway.open_session()
        context = ModelContext(model="arl-policy",
                               client=EvalClientConfig(base_url=gateway.base_url(sid), api_key_var=API_KEY_VARIABLE))
        guard = 2 * self.timeout_s + 60.0  # past verifiers' own deadlines (episode, then finalize)
        async with gate:
            try:
                played = await asyncio.wait_for(self.env.run_episode(self.task_of(task.seed), context), guard)
            except TimeoutError:
                played = None
        session = gateway.close_session(sid)
        if played is None:
            return self._episode(session, task, episode_id, f"no end after {guard:g} s (cancelled)")
        errors = [*played.errors, *(e for trace in played.traces for e in trace.errors)]
        failure = "" if played.ok else "; ".join(f"{e.type}: {e.message}" for e in errors) or "not ok"
        trained = [trace for trace in played.traces if trace.agent.trainable]
        trained_ids = {trace.id for trace in trained}
        if session.calls and not failure and not any(call.origin in trained_ids for call in session.calls):
            failure = "no call came from a trainable agent (none carried its trace id in X-Session-ID)"
        session.calls = [call for call in session.calls if call.origin in trained_ids]
        session.reward = float(sum(trace.reward for trace in trained))
        named = [trace.rewards[self.won_reward] for trace in trained if self.won_reward in trace.rewards]
        session.won = any(r is not None and r.score > 0 for r in named) if self.won_reward else session.reward > 0
        return self._episode(session, task, episode_id, failure)


__all__ = ["VerifiersLoop", "VerifiersSettings", "env_config"]
