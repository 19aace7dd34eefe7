"""Episodes played by a user's agent program through the recording gateway (``env=program``).

A user's agent is any program that talks to an OpenAI-compatible endpoint: it reads its base URL from
``OPENAI_BASE_URL`` (the ``openai`` client does), plays one episode of its task (``ARL_TASK_SEED``),
and reports the outcome (``POST {"reward": r, "won": bool}``) to its reward URL, which it reads once from the
pipe whose descriptor ``ARL_REWARD_FD`` names (:func:`read_reward_url` says how): not from its environment,
so the tools it runs (model-written code among them) inherit no way to report for it.
:class:`ProgramLoop` rolls out like :class:`~arl.agent.loop.AgentLoop` (``run(tasks, group_size,
params)`` -> episodes ordered by group and member): one program run per episode, every run of an
iteration at once (at most ``max_concurrency``), each against its own session of a
:class:`~arl.agent.gateway.RecordingGateway` that serves the rollout engine and records every call.

Each recorded call is a turn: its exact prompt ids, sampled ids and log-probs, and its reward (the
program's ``rewards``, one per call, where it reports them; else 0 except the last call, which
receives the reported return); a call the program reported in ``invalid_calls`` is an
invalid turn (the format penalty), as is one the gateway found invalid (a tool call that did not parse, or one
that broke the request's ``tool_choice``); the anchor hashes the call's last message (the state the program
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
import shutil
import signal
import subprocess
import sys
import tempfile
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
                 max_concurrency: int, max_calls: int = 256):
        self.engine = engine
        self.tokenizer = tokenizer
        self.task_type = task_type
        self.timeout_s = float(timeout_s)
        self.max_concurrency = int(max_concurrency)
        self.max_calls = int(max_calls)  # calls an episode may make; the next fails it (the gateway's max_calls)
        self.spec = EnvSpec(name=env_name, max_turns=0, invalid_action="", render_prompt=_no_prompt,
                            check_admissible=False)
        self.sample_mode = "turn"
        self.template: TrajectoryTemplate | None = None
        self.max_prompt_tokens: int | None = None  # a longer prompt fails its episode (rollout.max_prompt_tokens)
        self.tool_parser = "hermes"  # how answers to requests with tools are read for calls (rollout.tool_parser)
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
                              max_prompt_tokens=self.max_prompt_tokens, max_calls=self.max_calls,
                              tool_parser=self.tool_parser) as gateway:
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
            problem = session.invalid_requests.get(call.request, "")  # the gateway's: a call that did not parse
            valid = call.request not in session.invalid_calls and not problem
            # without per-call rewards the return goes to the episode's last turn, the one marked done
            reward = per_call[call.request] if per_call is not None else (
                float(session.reward or 0.0) if n == len(order) - 1 else 0.0)
            episode.turns.append(Turn(
                prompt_ids=call.prompt_ids, response_ids=call.response_ids, rollout_log_probs=call.log_probs,
                response_text=call.text, action=call.text if valid else "", valid=valid,
                reason="" if valid else (problem or "reported invalid"), reward=reward,
                done=n == len(order) - 1, anchor_key=anchor_key(call.messages[-1]["content"]),
                truncated=call.finish_reason == "length", observation=call.messages[-1]["content"],
                stream_start=n > 0 and k in starts, message=call.message or None,
            ))
        if failure:
            log.warning("env=%s: group %d episode %d failed: %s", self.spec.name, task.group_id, episode_id, failure)
            episode.env_error = True
        else:
            episode.won, episode.score = session.won, 1.0 if session.won else 0.0
        return episode

    def close(self) -> None:  # noqa: B027 - nothing to close is the common case, not a hook to fill
        """Nothing stays up between rollouts (each starts and stops its gateway)."""


#: the trainer's environment variables a program gets (with ``pass_env``'s): what a program needs to find its
#: interpreter, packages, locale and certificates, and no credential (tracker keys, hub tokens stay out)
ALLOWED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ",
               "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
               "ARL_CACHE", "PIP_FIND_LINKS", "OMP_NUM_THREADS")
ISOLATIONS = ("auto", "pid_namespace", "process_group")
OUTPUT_TAIL = 4096  # bytes of a failed program's stderr quoted in its failure (the rest is read and dropped)


def pid_namespace_works() -> bool:
    """Whether bubblewrap can give a program a PID namespace of its own here (``bwrap`` installed and user
    namespaces allowed): the program then sees no other process, and every process it leaves is killed when it
    ends, however it detached."""
    if shutil.which("bwrap") is None:
        return False
    try:
        return subprocess.run(["bwrap", "--dev-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "true"],
                              capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def program_env(sid_env: dict[str, str], pass_env: Sequence[str] = ()) -> dict[str, str]:
    """A program's environment: the allow-listed variables of this process (:data:`ALLOWED_ENV`, ``LC_*``, and
    the names in ``pass_env``), then the episode's own (``sid_env``: its endpoint, reward pipe and task)."""
    names = set(ALLOWED_ENV) | set(pass_env)
    kept = {k: v for k, v in os.environ.items() if k in names or k.startswith("LC_")}
    return {**kept, **sid_env}


class ProgramLoop(GatewayLoop):
    """Rollouts by an agent program (module docstring).

    A program runs with an environment built from an allow-list (:func:`program_env`: no trainer secret reaches
    it), in a PID namespace of its own where bubblewrap allows it (it sees no other episode's process, and all it
    started dies with it), else in its own process group, killed whole when it ends. Its stdout is discarded and
    its stderr read as bytes (the tail quoted when it fails), so output of any size or encoding costs nothing
    and a program that cannot start fails only its episode.

    Args:
        engine: the rollout engine the gateway serves.
        tokenizer: the policy's tokenizer (its chat template renders the program's messages).
        command: the program and its arguments (``["python", "examples/openai_sokoban_agent.py"]``).
        task_type: the episodes' task type when the program reports none.
        timeout_s: seconds a run may take before it is killed (a failed episode).
        max_concurrency: program runs at once.
        max_calls: calls an episode may make; the next is refused and fails the episode.
        isolation: ``auto`` (a PID namespace where bubblewrap works, else a process group), ``pid_namespace``
            (refused where bubblewrap cannot) or ``process_group``.
        pass_env: names of further variables of the trainer's environment the program needs.
    """

    def __init__(self, engine: RolloutEngine, tokenizer, command: Sequence[str], task_type: str = "program",
                 timeout_s: float = 120.0, max_concurrency: int = 64, max_calls: int = 256,
                 isolation: str = "auto", pass_env: Sequence[str] = ()):
        if not command:
            raise ValueError("env=program needs env.kwargs.command: the agent program and its arguments")
        if isolation not in ISOLATIONS:
            raise ValueError(f"env.kwargs.isolation={isolation!r}; valid: {', '.join(ISOLATIONS)}")
        super().__init__(engine, tokenizer, PROGRAM_ENV, task_type, timeout_s, max_concurrency, max_calls)
        self.command = [sys.executable if part == "python" else str(part) for part in command]
        self.pass_env = tuple(str(n) for n in pass_env)
        namespace = isolation != "process_group" and pid_namespace_works()
        if isolation == "pid_namespace" and not namespace:
            raise ValueError("env.kwargs.isolation=pid_namespace needs bubblewrap with user namespaces (apt-get install "
                             "bubblewrap); env.kwargs.isolation=process_group runs without it")
        self.isolation = "pid_namespace" if namespace else "process_group"

    def _play_all(self, gateway: RecordingGateway, slots: list[tuple[Task, int, int]]) -> list[Episode]:
        """One program run an episode, at most ``max_concurrency`` at once."""
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_concurrency, len(slots)))) as workers:
            return list(workers.map(lambda slot: self._play(gateway, *slot), slots))

    def _argv(self) -> list[str]:
        if self.isolation == "pid_namespace":
            return ["bwrap", "--dev-bind", "/", "/", "--proc", "/proc", "--unshare-pid", "--die-with-parent",
                    "--", *self.command]
        return list(self.command)

    def _play(self, gateway: RecordingGateway, task: Task, member: int, episode_id: int) -> Episode:
        sid = gateway.open_session()
        read_end, write_end = os.pipe()  # the reward URL, readable once, by the program (its tools come later)
        try:
            os.write(write_end, gateway.reward_url(sid).encode())
            os.close(write_end)
            env = program_env({"OPENAI_BASE_URL": gateway.base_url(sid), "OPENAI_API_KEY": "arl",
                               "ARL_REWARD_FD": str(read_end), "ARL_TASK_SEED": str(task.seed),
                               "ARL_GROUP_ID": str(task.group_id), "ARL_MEMBER": str(member)}, self.pass_env)
            failure = run_program(self._argv(), env, self.timeout_s, pass_fds=(read_end,))
        finally:
            os.close(read_end)
        session = gateway.close_session(sid)
        return self._episode(session, task, episode_id, failure)


def read_reward_url() -> str:
    """In an agent program: its reward URL, read from the pipe ``ARL_REWARD_FD`` names (once: read it before
    starting any tool; a shell reads it with ``read -r url <&"$ARL_REWARD_FD"``). Importing ARL is not needed:
    ``os.read(int(os.environ["ARL_REWARD_FD"]), 4096).decode()`` is the whole of it."""
    fd = int(os.environ["ARL_REWARD_FD"])
    with os.fdopen(fd, "rb") as pipe:
        return pipe.read().decode()


def run_program(argv: Sequence[str], env: dict[str, str], timeout_s: float, pass_fds: Sequence[int] = ()) -> str:
    """Run one program to its end (or ``timeout_s``) in a process group of its own, then kill the group, so that
    nothing it started outlives it; ``pass_fds``: descriptors it inherits (no other does). Returns why the
    episode failed ("" when it exited 0)."""
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True, pass_fds=tuple(pass_fds))
        except OSError as exc:  # a missing interpreter, a file that is not executable
            return f"the program could not start: {exc}"
        try:
            code = proc.wait(timeout=timeout_s)
            failure = "" if code == 0 else f"exit code {code}: {_tail(err)}"
        except subprocess.TimeoutExpired:
            failure = f"no end after {timeout_s:g} s (killed)"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group: what the program started and left behind
            except ProcessLookupError:
                pass
            proc.wait()
    return failure


def _tail(file) -> str:
    """The last :data:`OUTPUT_TAIL` bytes of ``file``, decoded whatever their encoding, stripped."""
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(max(0, size - OUTPUT_TAIL))
    return file.read().decode("utf-8", errors="replace").strip()[-300:]


__all__ = ["GatewayLoop", "ProgramLoop", "read_reward_url"]
