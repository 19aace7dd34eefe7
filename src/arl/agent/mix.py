"""One policy over several environments (``env=mix``): a loop that plays each task in one member env.

:class:`MixLoop` holds one :class:`~arl.agent.loop.AgentLoop` per member (all around the same engine and
tokenizer; each with its own env pool, prompts, ``history_window``, ``max_turns`` and spec) and plays the
interface the rollout DataModule uses: ``run(tasks, group_size, params, first_episode_id)``, ``last_stats``,
``pool.restarts``, ``spec``, ``sample_mode``, ``engine``, ``tokenizer``, ``close()``.

Each task (a group) plays one member, drawn from the task seed and the weights in force
(:func:`choose_members`): the same seed and weights draw the same member, so a resumed run, another rank or
the asynchronous rollout process draws what the uninterrupted run drew. A group never crosses members, so
the advantages and the dynamic-sampling filter, which work on groups, compare episodes of one env only.
The members play one after the other within one ``run`` (each member's episodes in one rollout of its own
loop); the episodes come back in task order, with the episode ids the caller assigned
(``first_episode_id + task index x group_size + member of the group``) and each ``Episode.env_name`` the
member's name. docs/mixtures.md has the config, the metrics and the curriculum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from arl.agent.loop import AgentLoop, RolloutStats, Task
from arl.agent.records import Episode
from arl.envs.registry import MIX_ENV
from arl.rollout.engine import SamplingParams

MIX_NAME = MIX_ENV  # env.name of a mixture
DRAW_SALT = 0x6D6978  # "mix": the member draw's own stream of a task seed (no other draw of the seed uses it)


def choose_members(seeds: Sequence[int], names: Sequence[str], weights: Mapping[str, float]) -> list[str]:
    """The member each task seed plays: a uniform of ``np.random.default_rng([seed, DRAW_SALT])`` against the
    cumulative normalised ``weights`` of ``names`` (in that order). A member of weight 0 is never drawn; the
    weights must not all be 0."""
    w = np.array([float(weights.get(n, 0.0)) for n in names], dtype=np.float64)
    if not len(w) or w.min() < 0 or w.sum() <= 0:
        raise ValueError(f"mix weights {dict(weights)} must be >= 0 and not all 0 (members: {', '.join(names)})")
    cumulative = np.cumsum(w / w.sum())
    cumulative[-1] = 1.0  # the last member with a weight takes what float rounding left
    out = []
    for seed in seeds:
        u = np.random.default_rng([int(seed), DRAW_SALT]).random()
        out.append(names[min(int(np.searchsorted(cumulative, u, side="right")), len(names) - 1)])
    return out


@dataclass(frozen=True)
class Member:
    """One member of a mix: its name (``env.members.<name>``), its loop, and the held-out episodes it
    validates on (None: ``rollout.val_episodes``)."""

    name: str
    loop: AgentLoop
    val_episodes: int | None = None


@dataclass(frozen=True)
class MixSpec:
    """What the DataModule reads of a mix's spec: the mix as a whole grades nothing (each graded member's
    score is logged under its own name)."""

    name: str = MIX_NAME
    graded: bool = False


class _Pools:
    """The members' env pools as one (``restarts`` summed; closing closes every one)."""

    def __init__(self, loops: Sequence[AgentLoop]):
        self.loops = loops

    @property
    def restarts(self) -> int:
        return sum(loop.pool.restarts for loop in self.loops)

    @property
    def n_workers(self) -> int:
        return sum(loop.pool.n_workers for loop in self.loops)


class MixLoop:
    """Rollouts over several member envs (module docstring), the members drawn by ``weights``."""

    env_name = MIX_NAME

    def __init__(self, members: Sequence[Member], weights: Mapping[str, float]):
        if not members:
            raise ValueError("a mix needs at least one member")
        self.members = list(members)
        self.names = [m.name for m in self.members]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"mix member names repeat: {self.names}")
        modes = {m.name: m.loop.sample_mode for m in self.members}
        if len(set(modes.values())) > 1:
            raise ValueError(f"the members of a mix must share one sample mode (rollout.sample_mode); the chat "
                             f"template gives them {modes} (an env with native tools may fall back to turn mode)")
        for m in self.members:
            m.loop.label = m.name  # its episodes' env_name
        first = self.members[0].loop
        self.engine, self.tokenizer, self.sample_mode = first.engine, first.tokenizer, first.sample_mode
        self.spec = MixSpec()
        self.pool = _Pools([m.loop for m in self.members])
        self.last_stats = RolloutStats()
        self.weights: dict[str, float] = {}
        self.set_weights(weights)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Make ``weights`` (member name -> weight >= 0, not all 0; a member left out weighs 0) the weights
        the next rollouts draw by."""
        unknown = set(weights) - set(self.names)
        if unknown:
            raise ValueError(f"mix weights name {sorted(unknown)}, which are not members ({', '.join(self.names)})")
        total = sum(float(w) for w in weights.values())
        if any(float(w) < 0 for w in weights.values()) or total <= 0:
            raise ValueError(f"mix weights {dict(weights)} must be >= 0 and not all 0")
        self.weights = {n: float(weights.get(n, 0.0)) for n in self.names}

    def member(self, name: str) -> Member:
        return self.members[self.names.index(name)]

    def choose(self, seeds: Sequence[int]) -> list[str]:
        """The member each task seed plays under the weights in force (:func:`choose_members`)."""
        return choose_members(seeds, self.names, self.weights)

    def run(
        self, tasks: Sequence[Task], group_size: int, params: SamplingParams, first_episode_id: int = 0,
        teacher: str | None = None,
    ) -> list[Episode]:
        """Roll out ``len(tasks) * group_size`` episodes, each task in the member its seed draws; returns them
        ordered by (task, member of the group), with the ids :meth:`AgentLoop.run` would give them."""
        if teacher is not None:
            raise ValueError("a teacher (DAgger) is one env's expert; the members of a mix each have their own")
        chosen = self.choose([t.seed for t in tasks])
        out: list[Episode | None] = [None] * (len(tasks) * group_size)
        stats = RolloutStats()
        for m in self.members:
            where = [i for i, name in enumerate(chosen) if name == m.name]
            if not where:
                continue
            episodes = m.loop.run([tasks[i] for i in where], group_size, params, first_episode_id)
            stats.add(m.loop.last_stats)
            for j, i in enumerate(where):
                for k in range(group_size):
                    episode = episodes[j * group_size + k]
                    episode.episode_id = first_episode_id + i * group_size + k
                    out[i * group_size + k] = episode
        self.last_stats = stats
        return [e for e in out if e is not None]

    def close(self) -> None:
        for m in self.members:
            m.loop.close()
