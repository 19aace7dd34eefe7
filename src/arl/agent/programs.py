"""Episodes played by a user's agent program through the recording gateway (``env=program``).

A user's agent is any program that talks to an OpenAI-compatible endpoint: it reads its base URL from
``OPENAI_BASE_URL`` (the ``openai`` client does), plays one episode of its task (``ARL_TASK_SEED``),
and reports the outcome to ``ARL_REWARD_URL`` (``POST {"reward": r, "won": bool}``).
:class:`ProgramLoop` rolls out like :class:`~arl.agent.loop.AgentLoop` (``run(tasks, group_size,
params)`` -> episodes ordered by group and member): one program run per episode, every run of an
iteration at once (at most ``max_concurrency``), each against its own session of a
:class:`~arl.agent.gateway.RecordingGateway` that serves the rollout engine and records every call.

Each recorded call is a turn: its exact prompt ids, sampled ids and log-probs, and its reward (the
program's ``rewards``, one per call, where it reports them; else 0 except the last call, which
receives the reported return); a call the program reported in ``invalid_calls`` is an
invalid turn (the format penalty); the anchor hashes the call's last message (the state the program
showed). A program that runs past ``timeout_s``, exits with an error, sends a malformed request,
makes no call, or reports no reward is a *failed episode*: ``env_error`` (counted in
``rollout/env_errors``, left out of the update, as a crashed environment worker's episode), never a
stalled rollout, as is one whose prompt passes ``rollout.max_prompt_tokens``. Turn samples, or trajectory
samples (``rollout.sample_mode=trajectory``): a call whose messages continue an earlier call's of the same
conversation (its messages, the answer as sent, one new user message) is spliced onto that call's token
stream (:meth:`~arl.agent.gateway.RecordingGateway.render`), so a program that keeps its conversation gives
one stream per episode; a call that rewrote the history begins a new stream (``Turn.stream_start``).
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from arl.agent.gateway import Call, RecordingGateway, Session
from arl.agent.loop import RolloutStats, Task
from arl.agent.prompts import TemplateError, TrajectoryTemplate
from arl.agent.records import Episode, Turn, anchor_key
from arl.envs.base import EnvSpec
from arl.envs.registry import PROGRAM_ENV
from arl.rollout.engine import RolloutEngine, SamplingParams

log = logging.getLogger(__name__)


def _no_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    raise RuntimeError("the agent program (or the verifiers environment) writes its own prompts")


@dataclass
class _Pool:
    """What the DataModule reads of an agent loop's environment pool."""

    restarts: int = 0


def _streams(calls: Sequence[Call]) -> tuple[list[int], set[int]]:
    """The positions of ``calls`` stream by stream (the streams in the order they began, each stream's calls
    in the order they ended) and the positions that begin a stream. A call continues the stream of its
    ``parent`` when that call is among ``calls``, else it begins one (a program that rewrote its history,
    another agent's conversation, a parent left out)."""
    position = {call.index: k for k, call in enumerate(calls)}
    stream_of: dict[int, int] = {}
    streams: dict[int, list[int]] = {}
    for k, call in enumerate(calls):
        stream_of[k] = stream_of[position[call.parent]] if call.parent in position else k
        streams.setdefault(stream_of[k], []).append(k)
    return [k for members in streams.values() for k in members], set(streams)


class GatewayLoop(ABC):
    """Rollouts whose episodes something else plays through a :class:`RecordingGateway` (module docstring):
    a subclass says how (``_play_all``); this base runs the gateway, times the rollout and turns each
    session's recorded calls into an :class:`~arl.agent.records.Episode`.

    Args:
        engine: the rollout engine the gateway serves.
        tokenizer: the policy's tokenizer (its chat template renders the messages).
        env_name: the episodes' ``env_name`` (``program``, ``verifiers``).
        task_type: the episodes' task type when the player reports none.
        timeout_s: seconds an episode may take before it is given up (a failed episode).
        max_concurrency: episodes played at once.
    """

    def __init__(self, engine: RolloutEngine, tokenizer, env_name: str, task_type: str, timeout_s: float,
                 max_concurrency: int):
        self.engine = engine
        self.tokenizer = tokenizer
        self.task_type = task_type
        self.timeout_s = float(timeout_s)
        self.max_concurrency = int(max_concurrency)
        self.spec = EnvSpec(name=env_name, max_turns=0, invalid_action="", render_prompt=_no_prompt,
                            check_admissible=False)
        self.sample_mode = "turn"
        self.template: TrajectoryTemplate | None = None
        self.max_prompt_tokens: int | None = None  # a longer prompt fails its episode (rollout.max_prompt_tokens)
        self.pool = _Pool()
        self.last_stats = RolloutStats()

    def use_trajectory_samples(self) -> None:
        """``rollout.sample_mode=trajectory``: the gateway splices each call that continues an earlier one onto its
        token stream (:meth:`RecordingGateway.render`), so an episode is one sample per stream. A chat
        template that re-renders earlier turns cannot be spliced: turn samples then, with a warning."""
        template = TrajectoryTemplate(self.tokenizer)
        try:
            template.check()
        except TemplateError as err:
            log.warning("sample_mode=trajectory is not possible with this chat template (%s); using turn mode", err)
            return
        self.template, self.sample_mode = template, "trajectory"

    def run(self, tasks: Sequence[Task], group_size: int, params: SamplingParams, first_episode_id: int = 0,
            teacher: str | None = None) -> list[Episode]:
        """``len(tasks) * group_size`` episodes; ordered by (group, member)."""
        if teacher is not None:
            raise ValueError(f"env={self.spec.name} has no expert to label turns with (DAgger)")
        t0 = time.perf_counter()
        slots = [(task, member, first_episode_id + i * group_size + member)
                 for i, task in enumerate(tasks) for member in range(group_size)]
        batch = getattr(self.engine, "max_batch_size", 64)
        with RecordingGateway(self.engine, self.tokenizer, params, max_batch_size=batch, trajectory=self.template,
                              max_prompt_tokens=self.max_prompt_tokens) as gateway:
            episodes = self._play_all(gateway, slots)
            stats = RolloutStats(seconds=time.perf_counter() - t0, generate_seconds=gateway.generate_seconds,
                                 generated_tokens=gateway.generated_tokens, engine_calls=gateway.engine_calls,
                                 env_steps=sum(e.num_turns for e in episodes))
        stats.env_seconds = max(0.0, stats.seconds - stats.generate_seconds)
        self.last_stats = stats
        return episodes

    @abstractmethod
    def _play_all(self, gateway: RecordingGateway, slots: list[tuple[Task, int, int]]) -> list[Episode]:
        """The episodes of ``slots`` ((task, member, episode id) each), in their order."""

    def _episode(self, session: Session, task: Task, episode_id: int, failure: str) -> Episode:
        """The episode of a session's calls (a call a turn; trajectory samples: stream by stream, each call that
        begins a later stream marked ``stream_start``); a failure makes it a failed episode."""
        failure = failure or (f"malformed request: {session.malformed}" if session.malformed else "")
        if not failure and not session.calls:
            failure = "no call to the model"
        if not failure and session.reward is None:
            failure = "no reward reported"
        if not failure and not math.isfinite(session.reward):  # a rubric's NaN, say: no NaN reaches the advantages
            failure = f"a reward that is not a finite number ({session.reward})"
        calls = session.calls
        if not failure and session.rewards is not None and len(session.rewards) != len(calls):
            failure = f"reported {len(session.rewards)} per-call rewards for {len(calls)} calls"
        if not failure and any(k >= len(calls) for k in session.invalid_calls):
            failure = f"reported invalid calls {list(session.invalid_calls)} of {len(calls)} calls"
        episode = Episode(group_id=task.group_id, episode_id=episode_id, seed=task.seed, env_name=self.spec.name,
                          task_type=session.task_type or self.task_type)
        # a report's call k is the k-th request (concurrent calls may have ended in another order)
        per_call = session.rewards if session.rewards is not None and len(session.rewards) == len(calls) else None
        order, starts = _streams(calls) if self.sample_mode == "trajectory" else (
            sorted(range(len(calls)), key=lambda k: calls[k].request), set())
        for n, k in enumerate(order):
            call = calls[k]
            valid = call.request not in session.invalid_calls
            # without per-call rewards the return goes to the episode's last turn, the one marked done
            reward = per_call[call.request] if per_call is not None else (
                float(session.reward or 0.0) if n == len(order) - 1 else 0.0)
            episode.turns.append(Turn(
                prompt_ids=call.prompt_ids, response_ids=call.response_ids, rollout_log_probs=call.log_probs,
                response_text=call.text, action=call.text if valid else "", valid=valid,
                reason="" if valid else "reported invalid", reward=reward,
                done=n == len(order) - 1, anchor_key=anchor_key(call.messages[-1]["content"]),
                truncated=call.finish_reason == "length", observation=call.messages[-1]["content"],
                stream_start=n > 0 and k in starts,
            ))
        if failure:
            log.warning("env=%s: group %d episode %d failed: %s", self.spec.name, task.group_id, episode_id, failure)
            episode.env_error = True
        else:
            episode.won, episode.score = session.won, 1.0 if session.won else 0.0
        return episode

    def close(self) -> None:  # noqa: B027 - nothing to close is the common case, not a hook to fill
        """Nothing stays up between rollouts (each starts and stops its gateway)."""


class ProgramLoop(GatewayLoop):
    """Rollouts by an agent program (module docstring).

    Args:
        engine: the rollout engine the gateway serves.
        tokenizer: the policy's tokenizer (its chat template renders the program's messages).
        command: the program and its arguments (``["python", "examples/openai_sokoban_agent.py"]``).
        task_type: the episodes' task type when the program reports none.
        timeout_s: seconds a run may take before it is killed (a failed episode).
        max_concurrency: program runs at once.
    """

    def __init__(self, engine: RolloutEngine, tokenizer, command: Sequence[str], task_type: str = "program",
                 timeout_s: float = 120.0, max_concurrency: int = 64):
        if not command:
            raise ValueError("env=program needs env.kwargs.command: the agent program and its arguments")
        super().__init__(engine, tokenizer, PROGRAM_ENV, task_type, timeout_s, max_concurrency)
        self.command = [sys.executable if part == "python" else str(part) for part in command]

    def _play_all(self, gateway: RecordingGateway, slots: list[tuple[Task, int, int]]) -> list[Episode]:
        """One program run an episode, at most ``max_concurrency`` at once."""
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(slots)))) as workers:
            return list(workers.map(lambda slot: self._play(gateway, *slot), slots))

    def _play(self, gateway: RecordingGateway, task: Task, member: int, episode_id: int) -> Episode:
        sid = gateway.open_session()
        env = {**os.environ, "OPENAI_BASE_URL": gateway.base_url(sid), "OPENAI_API_KEY": "arl",
               "ARL_REWARD_URL": f"http://{gateway.host}:{gateway.port}/sessions/{sid}/reward",
               "ARL_TASK_SEED": str(task.seed), "ARL_GROUP_ID": str(task.group_id), "ARL_MEMBER": str(member)}
        failure = ""
        try:
            done = subprocess.run(self.command, env=env, capture_output=True, text=True, timeout=self.timeout_s,
                                  check=False)
            if done.returncode != 0:
                failure = f"exit code {done.returncode}: {done.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            failure = f"no end after {self.timeout_s:g} s (killed)"
        session = gateway.close_session(sid)
        return self._episode(session, task, episode_id, failure)


__all__ = ["GatewayLoop", "ProgramLoop"]
