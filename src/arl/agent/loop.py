"""AgentLoop: roll out groups of episodes, each turn prompt -> generate -> parse -> env step.

For each task (group id, seed) the loop opens ``group_size`` environments reset with the same seed.
A turn renders the episode's prompt, samples an answer, parses it strictly, and steps the
environment (the env's no-op for invalid answers). What the trainer later sees is exactly what was
sampled: the response ids and log-probs come from the engine, never from re-tokenised text.

Two schedules (``rollout.schedule``) run those turns:

- ``lockstep``: at every turn the prompts of all active episodes go to the engine in one
  ``engine.generate`` call; no episode starts its next turn before the longest answer of the call
  is finished and every environment has stepped.
- ``episode``: each episode advances on its own. Its request goes to a streaming engine
  (:class:`~arl.rollout.engine.StreamingEngine`: vLLM's engine steps, or the transformers engine's
  :class:`~arl.rollout.hf_stream.RefillDecoder`) that decodes whatever requests are in flight and
  hands each back as soon as it is finished; the episode's environment steps and its next request
  is queued while the others are still decoding. The engine seeds every request
  (:func:`~arl.rollout.engine.request_seed` of task, member and turn), so the episodes do not depend
  on the order in which requests finish.

Two sample modes (docs/design.md section 7):

- ``turn``: every turn's prompt is rendered afresh: the task, the last ``history_window`` turns as
  text, the current observation.
- ``trajectory``: an episode is one growing token stream; turn ``k``'s prompt is the stream so far
  (every earlier prompt and sampled response, verbatim) plus the chat template's continuation with
  the new observation. Each turn's ``prompt_ids`` is then a prefix of the next one's, which is what
  :func:`arl.agent.samples.trajectory_token_sample` relies on. The template is checked at start-up; one
  that does not render conversations as growing prefixes falls back to ``turn`` with a warning.
  An episode whose stream would pass ``max_prompt_tokens`` ends there (``Episode.context_full``).

An environment that offers functions (``EnvSpec.tools``: native tool calls, :mod:`arl.agent.tool_calls`)
is played as a chat conversation: the first prompt is its system and user messages with the tools rendered
by the chat template, each answer is read by the rollout's tool parser (``rollout.tool_parser``) into an
assistant message (its text and calls) and the environment's action (the calls, or the text without one),
and the observation comes back as one ``tool`` message a call (a ``user`` message after an answer without
calls). ``turn`` samples render the whole conversation afresh each turn (``history_window`` does not apply),
``trajectory`` samples splice it into one stream; either way a prompt past ``max_prompt_tokens`` ends the
episode (``Episode.context_full``). An answer whose call does not parse, or an empty one, is an invalid turn,
and the environment still receives its text, as an ``openai``-client agent would send it: the built-in loop
and such a program play the same conversation.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arl.agent.parsing import ParsedAction, env_verdict, parse_native, parse_response
from arl.agent.prompts import (
    HistoryItem,
    TemplateError,
    TrajectoryTemplate,
    build_messages,
    encode_prompt,
    render_history,
)
from arl.agent.records import Episode, Turn, anchor_key
from arl.agent.samples import SAMPLE_MODES
from arl.agent.tool_calls import observation_messages, parser_names, renders_tools
from arl.distributed.threads import rebalance
from arl.envs.base import StepResult
from arl.envs.pool import EnvPool
from arl.rollout.engine import Generation, RolloutEngine, SamplingParams, request_seed

log = logging.getLogger(__name__)

SCHEDULES = ("lockstep", "episode")  # rollout.schedule


@dataclass(frozen=True)
class Task:
    """One group's task: every member is reset with ``seed``."""

    group_id: int
    seed: int


@dataclass
class RolloutStats:
    """Timing and counts of one :meth:`AgentLoop.run`."""

    seconds: float = 0.0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    generated_tokens: int = 0
    env_steps: int = 0
    engine_calls: int = 0  # generate calls (lockstep) or engine steps (episode)
    decode_steps: int = 0  # decoding steps the engine ran (lockstep: the longest answer of each batch of a call)
    env_overlapped: bool = False  # env steps ran in workers beside the decoding: env_seconds is the loop's wait only
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rows_per_step(self) -> float:
        """Rows the engine decoded per decoding step, on average: how full its batches were (each
        decoded row gives one token a step, so the generated tokens count the rows)."""
        return self.generated_tokens / self.decode_steps if self.decode_steps else 0.0

    def add(self, other: RolloutStats) -> None:
        """Add ``other``'s times and counts to these (several rollout rounds of one iteration)."""
        for name in ("seconds", "generate_seconds", "env_seconds", "generated_tokens", "env_steps",
                     "engine_calls", "decode_steps"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.env_overlapped = self.env_overlapped or other.env_overlapped


Answer = tuple[Generation, str, ParsedAction]  # an engine's answer, its decoded text, and the strict parse of it


@dataclass
class Slot:
    """One episode in play: its record, what the env last showed (observation and info) and the
    history its prompts render."""

    episode: Episode
    observation: str
    info: dict[str, Any]
    history: list[HistoryItem] = field(default_factory=list)


@dataclass
class Rollout:
    """One :meth:`AgentLoop.run`: its slots (indexed by slot number, ordered by group, then member),
    how it samples, and its running counts."""

    slots: list[Slot]
    group_size: int
    params: SamplingParams
    teacher: str | None
    stats: RolloutStats
    t0: float  # perf_counter at its start

    @property
    def episodes(self) -> list[Episode]:
        return [s.episode for s in self.slots]


@dataclass(frozen=True)
class LoopOptions:
    """How the agent loop plays its episodes (the ``env.*`` and ``rollout.*`` keys of the same names).

    Attributes:
        history_window: earlier turns shown as text in a ``turn``-mode prompt.
        show_observations: the history shows those turns' observations too, not only the actions.
        max_turns: turns per episode (None: the environment's own limit; never above it).
        max_prompt_tokens: a longer prompt ends the episode (``trajectory``: its growing stream).
        sample_mode: ``turn`` or ``trajectory`` (module docstring).
        schedule: ``lockstep`` or ``episode`` (module docstring).
        n_workers: environment worker processes (0: in this process).
        step_timeout: seconds an env step may take before its worker is restarted.
        progress_every: seconds between progress lines of a long rollout (None: silent).
        tool_parser: how answers' native tool calls are read, for an env that offers tools (``hermes``,
            ``qwen3_xml``: :mod:`arl.agent.tool_calls`).
    """

    history_window: int = 2
    show_observations: bool = False
    max_turns: int | None = None
    max_prompt_tokens: int = 2048
    sample_mode: str = "turn"
    schedule: str = "lockstep"
    n_workers: int = 0
    step_timeout: float = 60.0
    progress_every: float | None = 60.0
    tool_parser: str = "hermes"

    def __post_init__(self) -> None:
        if self.sample_mode not in SAMPLE_MODES:
            raise ValueError(f"sample_mode={self.sample_mode!r} is not valid; valid: {', '.join(SAMPLE_MODES)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is not valid; valid: {', '.join(SCHEDULES)}")
        if self.tool_parser not in parser_names():
            raise ValueError(f"tool_parser={self.tool_parser!r} is not valid; valid: {', '.join(parser_names())}")


class AgentLoop:
    """Multi-turn rollouts of one environment type (``env_name`` built with ``env_kwargs``), played as
    ``options`` say."""

    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer,
        env_name: str,
        env_kwargs: dict[str, Any] | None = None,
        options: LoopOptions = LoopOptions(),
    ):
        schedule, sample_mode = options.schedule, options.sample_mode
        if schedule == "episode" and not callable(getattr(engine, "submit", None)):
            raise ValueError(f"schedule=episode needs a streaming engine (submit/poll); {type(engine).__name__} has none")
        self.schedule = schedule
        self.engine = engine
        self.tokenizer = tokenizer
        self.pool = EnvPool(env_name, env_kwargs, n_workers=options.n_workers, step_timeout=options.step_timeout)
        self.spec = self.pool.spec
        self.env_name = env_name
        self.label = env_name  # the episodes' env_name: the env's, or a mix member's name (arl.agent.mix)
        self.history_window = options.history_window
        self.show_observations = options.show_observations
        self.max_turns = min(options.max_turns or self.spec.max_turns, self.spec.max_turns)
        self.max_prompt_tokens = options.max_prompt_tokens
        self.last_stats = RolloutStats()
        self.sample_mode = sample_mode
        self.progress_every = options.progress_every  # seconds between progress lines of a long run (None: silent)
        self.tools = list(self.spec.tools)  # native tool calls (module docstring); empty: <action> answers
        self.tool_parser = options.tool_parser
        if self.tools and not renders_tools(tokenizer):
            self.pool.close()
            raise ValueError(f"env {env_name!r} offers native tool calls, and this model's chat template does not "
                             "render a tool list (the tiny model's, SmolLM2's and Qwen's do); use its text format "
                             "(math_tool: env.kwargs.tool_format=text) or a model whose template renders tools")
        self.template: TrajectoryTemplate | None = None
        if sample_mode == "trajectory":
            template = TrajectoryTemplate(tokenizer, self.tools)
            try:
                template.check()
                self.template = template
            except TemplateError as err:
                log.warning("sample_mode=trajectory is not possible with this chat template (%s); using turn mode", err)
                self.sample_mode = "turn"

    def prompt_ids(self, observation: str, history: list[HistoryItem], info: dict[str, Any]) -> list[int]:
        """Token ids of the prompt of one turn (also used for expert data, so BC sees the same)."""
        text = render_history(history, self.history_window, self.show_observations)
        ids = encode_prompt(self.tokenizer, build_messages(self.spec, observation, text, info))
        if len(ids) > self.max_prompt_tokens:
            raise ValueError(
                f"prompt of {len(ids)} tokens exceeds rollout.max_prompt_tokens={self.max_prompt_tokens}; "
                "lower env.history_window or raise the limit"
            )
        return ids

    def run(
        self, tasks: Sequence[Task], group_size: int, params: SamplingParams, first_episode_id: int = 0,
        teacher: str | None = None,
    ) -> list[Episode]:
        """Roll out ``len(tasks) * group_size`` episodes; returns them ordered by (group, member).

        ``teacher``: a ``"package.module:function"`` (an expert's ``expert_response``) asked, at
        every turn and before the env steps, to answer the state the policy faces; its answer is
        stored as ``Turn.expert_text`` (None where it failed). DAgger labels with it.
        """
        rebalance()  # other ARL processes may have started or ended since the last rollout
        r = Rollout([], group_size, params, teacher, RolloutStats(), time.perf_counter())
        active = self._start_episodes(r, tasks, first_episode_id)
        try:
            if self.schedule == "episode":
                self._run_episodes(r, active)
            else:
                self._run_lockstep(r, active)
        finally:
            self.pool.close_slots()
        r.stats.seconds = time.perf_counter() - r.t0
        self.last_stats = r.stats
        return r.episodes

    def _run_lockstep(self, r: Rollout, active: list[int]) -> None:
        """Every active episode's turn in one engine call, turn after turn."""
        shown = r.t0
        for turn in range(self.max_turns):
            if not active:
                break
            prompts, active = self._next_prompts(r, active)
            if not active:
                break
            tg = time.perf_counter()
            seeds = [request_seed(r.slots[slot].episode.seed, slot % r.group_size, turn) for slot in active]
            gens = self.engine.generate(prompts, r.params, seeds=seeds)
            r.stats.generate_seconds += time.perf_counter() - tg
            r.stats.engine_calls += 1
            width = max(1, int(getattr(self.engine, "max_batch_size", len(gens)) or len(gens)))
            r.stats.decode_steps += sum(max(len(g.token_ids) for g in gens[i : i + width]) for i in range(0, len(gens), width))
            answers = {slot: self._parse(r.slots[slot], gen) for slot, gen in zip(active, gens)}
            active = self._step_envs(r, active, prompts, answers)
            if self.progress_every is not None and active and time.perf_counter() - shown >= self.progress_every:
                shown = time.perf_counter()
                log.info(
                    "rollout: turn %d/%d | %d of %d episodes still playing, %d won | %.0fs",
                    turn + 1, self.max_turns, len(active), len(r.slots), sum(ep.won for ep in r.episodes), shown - r.t0,
                )

    def _run_episodes(self, r: Rollout, active: list[int]) -> None:
        """Each episode on its own over the streaming engine: a finished answer is parsed, its
        environment steps and its next request is queued while the other requests decode."""
        prompts: dict[int, list[int]] = {}

        def launch(slots: list[int]) -> None:
            slots = [s for s in slots if len(r.slots[s].episode.turns) < self.max_turns]
            ids, slots = self._next_prompts(r, slots)
            for slot, prompt in zip(slots, ids):
                prompts[slot] = prompt
                episode = r.slots[slot].episode
                seed = request_seed(episode.seed, slot % r.group_size, len(episode.turns))
                self.engine.submit(slot, prompt, r.params, seed)

        try:
            launch(active)
            self._stream_turns(r, prompts, launch)
        finally:
            if self.engine.in_flight:  # an error left requests behind: they must not reach the next rollout
                self.engine.abort()

    def _stream_turns(self, r: Rollout, prompts: dict[int, list[int]], launch) -> None:
        """Poll the engine until no request is in flight and no env is stepping; every finished
        answer steps its env and launches the episode's next turn.

        With env workers (and no teacher) the steps run in the workers while the engine goes on
        decoding (:meth:`EnvPool.step_begin`); ``stats.env_seconds`` then counts only the time the
        loop waited for them with nothing to decode."""
        stats = r.stats
        overlap = self.pool.n_workers > 0 and not r.teacher
        stats.env_overlapped = overlap
        stepping: dict[int, tuple[list[int], Answer]] = {}  # slot -> (prompt, answer)
        shown = r.t0
        while self.engine.in_flight or stepping:
            if self.engine.in_flight:
                tg = time.perf_counter()
                finished = self.engine.poll()
                stats.generate_seconds += time.perf_counter() - tg
                stats.engine_calls += 1
                stats.decode_steps += 1
                finished.sort(key=lambda pair: pair[0])  # env steps in slot order, whatever the finish order
                slots = [slot for slot, _ in finished]
                answers = {slot: self._parse(r.slots[slot], gen) for slot, gen in finished}
                if overlap and finished:
                    te = time.perf_counter()
                    self.pool.step_begin({slot: self._action(parsed) for slot, (_, _, parsed) in answers.items()})
                    stats.env_seconds += time.perf_counter() - te
                    stepping.update({slot: (prompts.pop(slot), answers[slot]) for slot in slots})
                elif finished:
                    launch(self._step_envs(r, slots, [prompts.pop(s) for s in slots], answers))
            if stepping:
                te = time.perf_counter()
                results = self.pool.step_ready(timeout=0.0 if self.engine.in_flight else 1.0)
                stats.env_seconds += time.perf_counter() - te
                if results:
                    slots = sorted(results)
                    done = {slot: stepping.pop(slot) for slot in slots}
                    answers = {slot: answer for slot, (_, answer) in done.items()}
                    stats.env_steps += len(slots)
                    self._count_tokens(answers, stats)
                    launch(self._record_turns(r, slots, [done[s][0] for s in slots], answers, results, {}))
            if self.progress_every is not None and time.perf_counter() - shown >= self.progress_every:
                shown = time.perf_counter()
                log.info(
                    "rollout: %d of %d episodes finished, %d won | %d turns, %d tokens, %.1f turns/s | %.0fs",
                    len(r.slots) - len(prompts) - len(stepping), len(r.slots), sum(ep.won for ep in r.episodes),
                    stats.env_steps, stats.generated_tokens, stats.env_steps / (shown - r.t0), shown - r.t0,
                )

    @staticmethod
    def _count_tokens(answers: dict[int, Answer], stats: RolloutStats) -> None:
        """Add the answers' tokens to ``stats``."""
        stats.generated_tokens += sum(len(gen.token_ids) for gen, _, _ in answers.values())

    def _action(self, parsed: ParsedAction) -> str:
        """What the env is sent for an answer: its action, or the env's no-op when it is invalid (a native
        tool-call answer: its action always, module docstring)."""
        return self.action_for(parsed)

    def action_for(self, parsed: ParsedAction) -> str:
        """What the env is sent for ``parsed`` (:meth:`_action`)."""
        if parsed.message is not None:
            return parsed.action
        return parsed.action if parsed.valid else self.spec.invalid_action

    def _step_envs(self, r: Rollout, slots: list[int], prompts: list[list[int]], answers: dict[int, Answer]) -> list[int]:
        """Ask the teacher (if any), step the environments of ``slots`` with their parsed actions,
        record the turns; returns the slots whose episodes go on."""
        actions = {slot: self._action(parsed) for slot, (_, _, parsed) in answers.items()}
        te = time.perf_counter()
        labels = self.pool.call(r.teacher, slots) if r.teacher else {}
        results = self.pool.step(actions)
        r.stats.env_seconds += time.perf_counter() - te
        r.stats.env_steps += len(actions)
        self._count_tokens(answers, r.stats)
        return self._record_turns(r, slots, prompts, answers, results, labels)

    def _start_episodes(self, r: Rollout, tasks: Sequence[Task], first_episode_id: int) -> list[int]:
        """Reset one env per (task, member) and open its slot in ``r`` (ordered by group, then
        member); returns the slots that started without an env error."""
        members = [task for task in tasks for _ in range(r.group_size)]
        starts = self.pool.reset([task.seed for task in members])
        active: list[int] = []
        for slot, (task, (observation, info, err)) in enumerate(zip(members, starts)):
            episode = Episode(
                group_id=task.group_id,
                episode_id=first_episode_id + slot,
                seed=task.seed,
                env_name=self.label,
                task_type=str(info.get("task_type", self.env_name)),
                env_error=err,
            )
            r.slots.append(Slot(episode, observation, info))
            if not err:
                active.append(slot)
        return active

    def _next_prompts(self, r: Rollout, active: list[int]) -> tuple[list[list[int]], list[int]]:
        """(prompt ids, slot) of every active slot that has a next turn, as two aligned lists; a
        slot whose trajectory stream is full drops out (:meth:`next_prompt`)."""
        prompts, still = [], []
        for slot in active:
            s = r.slots[slot]
            ids = self.next_prompt(s.episode, s.observation, s.history, s.info)
            if ids is not None:
                prompts.append(ids)
                still.append(slot)
        return prompts, still

    def _parse(self, slot: Slot, gen: Generation) -> Answer:
        """(generation, its text, the strict parse of it) of one slot's answer."""
        text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        return gen, text, self.parse_answer(text, slot.info, len(slot.episode.turns))

    def parse_answer(self, text: str, info: dict[str, Any], turn: int) -> ParsedAction:
        """The strict parse of answer ``text`` to a state with ``info``, at turn ``turn`` of its episode: an
        ``<action>`` answer (admissible actions checked where the env has them), or, for an env with tools, a
        native tool-call answer (its message's call ids numbered by ``turn``)."""
        if self.tools:
            return parse_native(text, self.tool_parser, self.tools, str(turn))
        admissible = info.get("admissible_actions") if self.spec.check_admissible else None
        return parse_response(text, admissible)

    def answer_ids(self, text: str) -> list[int]:
        """The token ids of an answer written as text (an expert's): its tokens, and for a native tool-call
        conversation the end-of-turn token too (the model learns to end its turn; an ``<action>`` answer ends at
        the ``</action>`` stop string)."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        eos = self.tokenizer.eos_token_id
        return ids + [eos] if self.tools and eos is not None else ids

    def _record_turns(
        self, r: Rollout, active: list[int], prompts: list[list[int]], answers: dict[int, Answer],
        results: dict[int, tuple[StepResult, bool]], labels: dict[int, tuple[Any, str]],
    ) -> list[int]:
        """Append each active slot's turn to its episode and history and take in the env's answer (the next
        observation and info, won, score, an env error, its verdict on the action); returns the slots still playing."""
        still_active = []
        for slot, prompt in zip(active, prompts):
            s = r.slots[slot]
            gen, text, parsed = answers[slot]
            result, err = results[slot]
            parsed = parsed if err else env_verdict(parsed, result.info)  # info["invalid_action"]: an invalid turn
            ep = s.episode
            reward = float(result.reward)
            if not math.isfinite(reward):  # an env's NaN or inf: the episode fails, counted, and is not trained on
                if not err:
                    log.warning("env=%s: episode %d: the env returned reward %s; the episode is failed",
                                self.env_name, ep.episode_id, reward)
                err, reward = True, 0.0
            ep.turns.append(Turn(
                prompt_ids=prompt, response_ids=list(gen.token_ids), rollout_log_probs=list(gen.log_probs),
                response_text=text, action=parsed.action if parsed.valid else "", valid=parsed.valid,
                reason=parsed.reason, reward=reward, done=bool(result.done),
                anchor_key=anchor_key(str(s.info.get("anchor", s.observation))),
                truncated=gen.finish_reason == "length", expert_text=labels[slot][0] if slot in labels else None,
                observation=s.observation, policy_version=gen.version, message=parsed.message,
            ))
            s.history.append(
                HistoryItem(s.observation, parsed.action if parsed.valid else f"invalid ({parsed.reason})", reward)
            )
            if err:
                ep.env_error = True
                continue
            ep.won = bool(result.info.get("won", ep.won))
            ep.score = float(result.info.get("score", ep.score))
            if not result.done:
                s.observation = result.observation
                s.info = {**s.info, **result.info}
                still_active.append(slot)
        return still_active

    def next_prompt(self, episode: Episode, observation: str, history: list[HistoryItem], info: dict[str, Any]) -> list[int] | None:
        """The prompt ids of ``episode``'s next turn in the loop's sample mode.

        Returns None in trajectory mode when the stream would pass ``max_prompt_tokens`` (the
        episode then ends with ``context_full``). Expert episodes use this too, so behaviour
        cloning trains on exactly the prompts the policy will see.
        """
        if self.tools:
            return self._native_prompt(episode, observation, info)
        if self.template is None:
            return self.prompt_ids(observation, history, info)
        if not episode.turns:
            ids = self.template.first_ids(self.spec.render_prompt(observation, "", info), info.get("system_prompt") or "")
            if len(ids) > self.max_prompt_tokens:
                raise ValueError(f"first prompt of {len(ids)} tokens exceeds rollout.max_prompt_tokens={self.max_prompt_tokens}")
            return ids
        last = episode.turns[-1]
        message = self.spec.observation_message(observation, info)
        ids = last.prompt_ids + last.response_ids + self.template.continuation_ids(message, last.response_ids)
        if len(ids) > self.max_prompt_tokens:
            episode.context_full = True
            return None
        return ids

    def _native_prompt(self, episode: Episode, observation: str, info: dict[str, Any]) -> list[int] | None:
        """:meth:`next_prompt` of a native tool-call conversation (module docstring): the first turn opens the
        conversation (``episode.opening``); a later one renders it whole (``turn``) or continues the stream with
        the observation's messages (``trajectory``). None when the prompt would pass ``max_prompt_tokens``."""
        if not episode.turns:
            system = info.get("system_prompt") or ""
            episode.opening = [{"role": "system", "content": system}] if system else []
            episode.opening.append({"role": "user", "content": self.spec.render_prompt(observation, "", info)})
            ids = encode_prompt(self.tokenizer, episode.opening, self.tools)
            if len(ids) > self.max_prompt_tokens:
                raise ValueError(f"first prompt of {len(ids)} tokens exceeds rollout.max_prompt_tokens={self.max_prompt_tokens}")
            return ids
        last = episode.turns[-1]
        if self.template is not None:
            following = observation_messages(last.message or {}, observation)
            ids = last.prompt_ids + last.response_ids + self.template.continuation_of(following, last.response_ids)
        else:
            ids = encode_prompt(self.tokenizer, self.conversation(episode, observation), self.tools)
        if len(ids) > self.max_prompt_tokens:
            episode.context_full = True
            return None
        return ids

    @staticmethod
    def conversation(episode: Episode, observation: str) -> list[dict[str, Any]]:
        """A native tool-call episode's conversation so far, up to ``observation`` (the latest): its opening,
        then each turn's answer and the observation's messages that followed it."""
        messages = list(episode.opening)
        for k, turn in enumerate(episode.turns):
            after = episode.turns[k + 1].observation if k + 1 < len(episode.turns) else observation
            messages.append(turn.message or {"role": "assistant", "content": turn.response_text})
            messages.extend(observation_messages(turn.message or {}, after))
        return messages

    def close(self) -> None:
        self.pool.close()
