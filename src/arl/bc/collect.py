"""Collecting the behaviour-cloning data: expert episodes, then self-bootstrapped and DAgger ones.

Self-bootstrapping (rejection sampling, as the paper's BC stage): the current policy plays fresh
training tasks at the sampling temperature, and an episode joins the dataset when its return
reaches ``min_return`` and every turn of it parsed (a kept episode never teaches a malformed
answer). The tokens kept are the very ids the engine sampled.

DAgger (Ross et al., 2011): the current policy plays fresh training tasks and the expert answers
every state the policy reached, the states after its mistakes included. Each labelled episode
keeps the policy's prompts (its own history of actions) with the expert's answers as the
responses: imitation learns to recover from the policy's own errors, which expert episodes never
show.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arl.agent.experts import expert_episodes, expert_path
from arl.agent.loop import AgentLoop, Task
from arl.agent.parsing import parse_response
from arl.agent.records import Episode
from arl.bc.dataset import BCEpisode
from arl.datamodules.rollout_datamodule import TRAIN_SEED_SPACE
from arl.rollout.engine import SamplingParams
from arl.utils.logging import console


def bc_seeds(seed: int, n: int, stream: int = 0) -> list[int]:
    """``n`` training-task seeds of the BC stage; ``stream`` 0 for experts, 1 for bootstrapping,
    ``2 + k`` for DAgger round ``k``."""
    rng = np.random.default_rng([int(seed), 2**31 - 1 - int(stream)])
    return [int(s) for s in rng.integers(0, TRAIN_SEED_SPACE, size=n)]


def keep_episode(episode: Episode, min_return: float) -> bool:
    """A self-sampled episode is kept when its return reaches ``min_return`` and all turns parsed."""
    return (
        not episode.env_error
        and bool(episode.turns)
        and episode.ret >= min_return
        and all(t.valid and not t.truncated for t in episode.turns)
    )


def _progress(what: str, done: int, total: int, t0: float) -> None:
    console.print(f"{what}: {done}/{total} episodes | {time.perf_counter() - t0:.0f}s")


def collect_expert(
    loop: AgentLoop, seeds: Sequence[int], log_every: int = 200
) -> tuple[list[BCEpisode], dict[str, float]]:
    """One expert episode per seed; only won episodes are kept. A log line every ``log_every``."""
    t0 = time.perf_counter()
    episodes: list[Episode] = []
    for start in range(0, len(seeds), log_every):
        episodes += expert_episodes(loop, seeds[start : start + log_every], group_offset=start)
        if len(seeds) > log_every:
            _progress("expert episodes", len(episodes), len(seeds), t0)
    kept = [BCEpisode(e, "expert") for e in episodes if e.won]
    stats = {
        "bc/expert_episodes": float(len(episodes)),
        "bc/expert_success": len(kept) / max(len(episodes), 1),
    }
    return kept, stats


@dataclass
class BootstrapResult:
    kept: list[BCEpisode]
    sampled: int
    success: float  # share of sampled episodes that won
    kept_ratio: float


def bootstrap(
    loop: AgentLoop, seeds: Sequence[int], params: SamplingParams, min_return: float, batch_size: int = 64
) -> BootstrapResult:
    """Sample one episode per seed with ``loop``'s engine; keep those that pass :func:`keep_episode`."""
    kept: list[BCEpisode] = []
    won = 0
    t0 = time.perf_counter()
    for start in range(0, len(seeds), batch_size):
        chunk = seeds[start : start + batch_size]
        tasks = [Task(group_id=start + i, seed=int(s)) for i, s in enumerate(chunk)]
        for ep in loop.run(tasks, 1, params, first_episode_id=start):
            won += ep.won
            if keep_episode(ep, min_return):
                kept.append(BCEpisode(ep, "self"))
        if len(seeds) > batch_size:
            _progress(f"self-bootstrapping ({len(kept)} kept)", start + len(chunk), len(seeds), t0)
    n = len(seeds)
    return BootstrapResult(kept, n, won / max(n, 1), len(kept) / max(n, 1))


@dataclass
class DaggerResult:
    labelled: list[BCEpisode]  # the policy's episodes with the expert's answers as responses
    sampled: int
    success: float  # share of sampled episodes the policy won
    turns: int  # turns labelled
    agreement: float  # share of labelled turns whose policy action was the expert's action


def relabel(episode: Episode, tokenizer, loop: AgentLoop | None = None) -> tuple[Episode, int]:
    """``episode`` with each turn's response replaced by its ``expert_text`` (turns without one are
    dropped); also returns how many kept turns the policy had already answered with the expert's
    action. The prompts stay the policy's: the states it reached, its own history in them. ``loop``: the
    loop that played it, which reads and tokenises the expert's answers as its own (a native tool-call
    conversation's: :meth:`AgentLoop.parse_answer`, :meth:`AgentLoop.answer_ids`); None reads them as
    ``<action>`` answers."""
    turns, agreed = [], 0
    for k, turn in enumerate(episode.turns):
        if not isinstance(turn.expert_text, str):
            continue
        if loop is None:
            ids = list(tokenizer(turn.expert_text, add_special_tokens=False)["input_ids"])
            expert = parse_response(turn.expert_text, None)
        else:
            ids, expert = loop.answer_ids(turn.expert_text), loop.parse_answer(turn.expert_text, {}, k)
        agreed += bool(turn.valid and expert.valid and turn.action == expert.action)
        turns.append(dataclasses.replace(
            turn, response_ids=ids, rollout_log_probs=[0.0] * len(ids), response_text=turn.expert_text,
            action=expert.action, valid=expert.valid, reason=expert.reason, truncated=False,
        ))
    return dataclasses.replace(episode, turns=turns), agreed


def dagger(
    loop: AgentLoop, seeds: Sequence[int], params: SamplingParams, batch_size: int = 64
) -> DaggerResult:
    """One DAgger round: the policy of ``loop``'s engine plays one episode per seed, the env's
    expert labels every turn (see the module docstring). Turn samples only: in trajectory mode
    the next prompt holds the policy's answer, which a relabelled turn no longer has."""
    if loop.sample_mode != "turn":
        raise ValueError(f"DAgger needs turn samples; this loop's sample mode is {loop.sample_mode!r}")
    teacher = expert_path(loop.env_name)
    labelled: list[BCEpisode] = []
    won = turns = agreed = 0
    t0 = time.perf_counter()
    for start in range(0, len(seeds), batch_size):
        chunk = seeds[start : start + batch_size]
        tasks = [Task(group_id=start + i, seed=int(s)) for i, s in enumerate(chunk)]
        for ep in loop.run(tasks, 1, params, first_episode_id=start, teacher=teacher):
            won += ep.won
            episode, hits = relabel(ep, loop.tokenizer, loop)
            if episode.turns:
                labelled.append(BCEpisode(episode, "dagger"))
                turns += len(episode.turns)
                agreed += hits
        if len(seeds) > batch_size:
            _progress(f"DAgger ({turns} turns labelled)", start + len(chunk), len(seeds), t0)
    n = len(seeds)
    return DaggerResult(labelled, n, won / max(n, 1), turns, agreed / max(turns, 1))
