"""Online data: every training batch is a fresh iteration of rollouts with the current policy.

The train loader is an ``IterableDataset`` that yields one
:class:`~arl.datamodules.batches.RolloutBatch` per RL iteration: ``tasks_per_iteration`` tasks x
``group_size`` episodes, passed through the dynamic-sampling filter with re-rollout top-up
(docs/design.md section 7, "Filter schedule"), then turned into training samples and collated into tensors
(:func:`arl.agent.samples.collate_episodes`), as the SFT DataModule hands over its batches. The
module receives tensors only.

The filter is the one call from this room into the algorithm: the builder hands the DataModule the
configured filter with its settings bound (``group_filter``, called with returns, group ids and the
valid-action ratio) and its schedule, and the DataModule applies it between rollout rounds, since
whether to roll out more is a data decision.

Task seeds are derived from (seed, iteration, round) so a run is reproducible and a resumed run
continues the same seed stream. Validation episodes use held-out seeds (a range no training seed falls in), group size 1 and the ``val_*`` sampling keys
(the paper's T 0.6, top-p 0.95, top-k 20; greedy with ``val_temperature=0``), from a generator of
their own so validation never moves the training stream.

Under data parallelism (DDP, FSDP) ``tasks_per_iteration`` and ``val_episodes`` are global: every
rank draws the same seed list and rolls out its own contiguous share of it (rank r of W takes
groups ``[G r / W, G (r+1) / W)``), so ranks do different tasks and one process with the same
config does exactly the union. Each rollout metric carries how it combines over ranks
(:class:`arl.utils.metrics.Metrics`), so the module can log exact global means.

The state (``state_dict``, saved in every checkpoint) is the iteration, the base seed, and every
rank's RNG states (python, numpy, torch) as they were when the checkpoint was written; a resumed
run restores its rank's states right before its first rollout, so sampling continues exactly as
in an uninterrupted run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, IterableDataset

from arl.agent.loop import AgentLoop, RolloutStats, Task
from arl.agent.metrics import episode_metrics
from arl.agent.mix import MixLoop
from arl.agent.records import Episode, episode_record
from arl.agent.samples import collate_episodes, episode_table
from arl.datamodules.batches import RolloutBatch, ValidationBatch
from arl.datamodules.curriculum import Curriculum
from arl.distributed import ranks as dist_utils
from arl.envs.base import VAL_SEED_BASE
from arl.rollout.engine import SamplingParams
from arl.utils.metrics import Metrics

log = logging.getLogger(__name__)

TRAIN_SEED_SPACE = VAL_SEED_BASE  # training task seeds lie in [0, VAL_SEED_BASE): never a validation seed


def train_task_seeds(seed: int, iteration: int, round_: int, n: int) -> list[int]:
    """Deterministic task seeds for one rollout round."""
    rng = np.random.default_rng([int(seed), int(iteration), int(round_)])
    return [int(s) for s in rng.integers(0, TRAIN_SEED_SPACE, size=n)]


def val_task_seeds(n: int, offset: int = 0) -> list[int]:
    """The held-out validation seeds."""
    return [VAL_SEED_BASE + offset + i for i in range(n)]


def rank_share(n: int, rank: int = 0, world: int = 1) -> tuple[int, int]:
    """The contiguous slice ``[start, end)`` of ``n`` items that rank ``rank`` of ``world`` takes."""
    return n * rank // world, n * (rank + 1) // world


GroupFilter = Callable[..., Any]  # (returns=, group_ids=, valid_ratio=) -> arl.algos.filters.FilterResult


class BatchSource(Protocol):
    """Where training batches come from when they are not rolled out in this process."""

    def next_batch(self, iteration: int) -> RolloutBatch:
        """The batch of ``iteration`` (the learner has made ``iteration`` updates)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold for the source to go on (its queued batches)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class IterationPlan:
    """What every RL iteration rolls out: ``tasks_per_iteration`` tasks x ``group_size`` episodes
    (global over data-parallel ranks) sampled with ``sampling``, ``iterations`` times in the run."""

    iterations: int
    tasks_per_iteration: int
    group_size: int
    sampling: SamplingParams


@dataclass(frozen=True)
class ValidationPlan:
    """How a validation runs: ``episodes`` held-out episodes (global over ranks), ``batch_size`` per
    engine batch, sampled with ``sampling`` (the ``rollout.val_*`` keys)."""

    sampling: SamplingParams
    episodes: int = 64
    batch_size: int = 64


@dataclass(frozen=True)
class FilterSchedule:
    """Dynamic sampling between rollout rounds (the ``algo.filter.*`` keys); the defaults are no filter.

    Attributes:
        group_filter: the configured filter with its settings bound (``(returns=, group_ids=,
            valid_ratio=) -> FilterResult``, :func:`arl.algos.filters.group_filter`), or None to keep
            everything.
        max_rollout_rounds: rounds of re-rollout the filter may ask for.
        cold_start: iterations before the filter starts (all groups kept until then).
        fill_last_round: the last round fills what is still missing with its other groups (the
            filter's groups first, then the rest in task order), so a batch always holds
            ``tasks_per_iteration`` groups, as the official trainers do; False trains on what the
            filter kept.
    """

    group_filter: GroupFilter | None = None
    max_rollout_rounds: int = 1
    cold_start: int = 0
    fill_last_round: bool = True


class _TrainStream(IterableDataset):
    def __init__(self, dm: RolloutDataModule):
        self.dm = dm

    def __iter__(self) -> Iterator[RolloutBatch]:
        while self.dm.iteration < self.dm.plan.iterations:
            yield self.dm.next_train_batch()

    def __len__(self) -> int:
        # The whole run is one epoch of ``iterations`` batches. A known length also stops Lightning
        # from prefetching a batch (which would roll out before the previous update). On resume
        # Lightning restores its batch counters mid-epoch, so the length stays the total.
        return self.dm.plan.iterations


def validation_protocol(params: SamplingParams) -> str:
    """``val_greedy`` or ``val_sampled``: the metric group that names how validation sampled."""
    return "val_greedy" if params.temperature <= 0 else "val_sampled"


def validation_episodes(
    loop: AgentLoop, plan: ValidationPlan, iteration: int = 0, shard: tuple[int, int] = (0, 1), seed: int = 0
) -> Iterator[tuple[list[Episode], float]]:
    """Held-out episodes (group size 1), ``plan.batch_size`` per engine batch; the share of rank
    ``shard[0]`` of ``shard[1]`` only. Yields (episodes, seconds) per engine batch.

    Sampled validation draws from its own torch generator state, seeded by (``seed``,
    ``iteration``, first episode), and every global RNG (python, numpy, torch, CUDA) is put back after each
    batch: the same weights validate to the same episodes, and validating (or not, or how often) never moves
    the training stream.
    """
    seeds = val_task_seeds(plan.episodes)
    lo, hi = rank_share(len(seeds), *shard)
    for start in range(lo, hi, plan.batch_size):
        chunk = seeds[start : min(start + plan.batch_size, hi)]
        tasks = [Task(group_id=start + i, seed=s) for i, s in enumerate(chunk)]
        t0 = time.perf_counter()
        training_stream = dist_utils.capture_rng()  # python, numpy, torch (+CUDA): put back whatever happens
        try:
            torch.manual_seed(int(np.random.SeedSequence([int(seed), int(iteration), start]).generate_state(1)[0]))
            eps = loop.run(tasks, 1, plan.sampling, first_episode_id=start)
        finally:
            dist_utils.restore_rng(training_stream)
        yield eps, time.perf_counter() - t0


def validation_sets(loop: AgentLoop | MixLoop, plan: ValidationPlan) -> list[tuple[str, AgentLoop, ValidationPlan]]:
    """What a validation plays: ``("", loop, plan)`` for one env; for a mix, ``(member, its loop, its plan)`` of
    every member, whatever its weight: each plays its own held-out seeds, ``plan.episodes`` of them or the
    member's ``val_episodes``, with the same seeds and sampling stream as a run of that env alone."""
    if not isinstance(loop, MixLoop):
        return [("", loop, plan)]
    return [(m.name, m.loop, replace(plan, episodes=m.val_episodes or plan.episodes)) for m in loop.members]


class _ValStream(IterableDataset):
    def __init__(self, dm: RolloutDataModule):
        self.dm = dm

    def __iter__(self) -> Iterator[ValidationBatch]:
        dm = self.dm
        protocol = validation_protocol(dm.validation.sampling)
        for member, loop, plan in validation_sets(dm.agent_loop, dm.validation):
            for eps, seconds in validation_episodes(loop, plan, dm.iteration, dm.rank_and_world(), dm.seed):
                # every episode is a row: a failed one counts as a loss (val/env_errors says how many failed)
                yield ValidationBatch(episode_table(eps), dm.iteration, seconds, protocol,
                                      tuple(e.task_type for e in eps), tuple(int(e.seed) for e in eps),
                                      tuple(episode_record(e) for e in eps), graded=loop.spec.graded, member=member)


class RolloutDataModule(LightningDataModule):
    """Rollout batches from an :class:`~arl.agent.loop.AgentLoop`.

    Args:
        agent_loop: renders prompts, calls the engine, steps the environments.
        plan: what every iteration rolls out (:class:`IterationPlan`).
        validation: how a validation runs (:class:`ValidationPlan`).
        schedule: the dynamic-sampling filter and its re-rollout schedule (:class:`FilterSchedule`;
            the default keeps every group).
        seed: base of the task-seed stream.
        pad_id: the padding token id of the collated batches (the policy tokenizer's).
    """

    def __init__(
        self,
        agent_loop: AgentLoop,
        plan: IterationPlan,
        validation: ValidationPlan,
        schedule: FilterSchedule = FilterSchedule(),
        seed: int = 0,
        pad_id: int = 0,
    ):
        super().__init__()
        self.pad_id = int(pad_id)
        self.agent_loop = agent_loop
        self.plan = plan
        self.validation = validation
        self.schedule = replace(schedule, max_rollout_rounds=max(1, int(schedule.max_rollout_rounds)))
        self.seed = seed
        self.source: BatchSource | None = None  # asynchronous RL: the rollout process's batches
        self.curriculum: Curriculum | None = None  # env=mix: the stages of member weights (use_curriculum)
        self.observed_validation: int | None = None  # the iteration of the last validation the curriculum saw
        self.iteration = 0
        self._pending_rng: dict[str, Any] | None = None  # restored right before the next rollout
        self._seeded = False

    def use_source(self, source: BatchSource) -> None:
        """Take the training batches from ``source`` instead of rolling them out here (asynchronous
        RL: :class:`arl.run.async_rollout.AsyncRollouts`, whose rollout process runs this same class);
        validation still plays here."""
        self.source = source

    def use_curriculum(self, curriculum: Curriculum) -> None:
        """Draw the mix's members by ``curriculum``'s stages (``env.curriculum``): each validation's values reach
        it at the next batch (:meth:`follow_curriculum`), and its state goes into every checkpoint."""
        if not isinstance(self.agent_loop, MixLoop):
            raise TypeError("a curriculum weighs the members of a mix (env=mix)")
        self.curriculum = curriculum
        self.agent_loop.set_weights(curriculum.weights())

    def rank_and_world(self) -> tuple[int, int]:
        """This process's data-parallel rank and the number of ranks (0, 1 without a Trainer)."""
        return dist_utils.rank_and_world(getattr(self, "trainer", None))

    # ------------------------------------------------------------------ state (resume)
    def state_dict(self) -> dict[str, Any]:
        """Iteration, base seed, and the RNG states of every rank (a collective under DDP/FSDP); with a
        batch source, its own state (asynchronous RL: the batches played and not yet trained)."""
        state = {
            "iteration": self.iteration,
            "seed": self.seed,
            "world_size": dist_utils.world_size(),
            "rng": dist_utils.all_gather_object(dist_utils.capture_rng()),
        }
        if self.source is not None:
            state["source"] = self.source.state_dict()
        if isinstance(self.agent_loop, MixLoop):  # the weights in force, and the curriculum that set them
            state["mix"] = {
                "weights": dict(self.agent_loop.weights),
                "curriculum": None if self.curriculum is None else self.curriculum.state_dict(),
                "observed_validation": self.observed_validation,
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.source is not None and "source" in state:
            self.source.load_state_dict(state["source"])
        self.iteration = int(state["iteration"])
        self.seed = int(state.get("seed", self.seed))
        if isinstance(self.agent_loop, MixLoop) and "mix" in state:
            self._load_mix(state["mix"])
        states = state.get("rng") or []
        rank, world = self.rank_and_world()
        if len(states) == world:
            self._pending_rng = states[rank]
        elif states:
            log.warning(
                "checkpoint holds RNG states of %d ranks, this run has %d: sampling will not continue "
                "bit-identically (the seed stream of tasks does)", len(states), world,
            )
        self._seeded = True

    def _load_mix(self, mix: dict[str, Any]) -> None:
        """A mix's state: the curriculum's stage and counters (its weights), else the weights the run drew by."""
        if self.curriculum is not None and mix.get("curriculum") is not None:
            self.curriculum.load_state_dict(mix["curriculum"])
            self.observed_validation = mix.get("observed_validation")
            self.agent_loop.set_weights(self.curriculum.weights())
        elif mix.get("weights") and dict(mix["weights"]) != self.agent_loop.weights:
            log.warning("the checkpoint's mix drew by the weights %s; this config's are %s, which the run goes on with",
                        dict(mix["weights"]), self.agent_loop.weights)

    # ------------------------------------------------------------------ loaders
    # Each loader has a generator of its own: a DataLoader draws its base seed when an iterator is made, from
    # the global torch RNG unless given one, and a validation (its loader made between two training iterations)
    # would move the training stream by that draw.
    def train_dataloader(self) -> DataLoader:
        return DataLoader(_TrainStream(self), batch_size=None, num_workers=0, generator=torch.Generator())

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_ValStream(self), batch_size=None, num_workers=0, generator=torch.Generator())

    # ------------------------------------------------------------------ one iteration
    def prepare_rng(self) -> None:
        """Restore a resumed run's RNG states; give each rank its own stream in a fresh run. Called right
        before the first rollout (with a batch source, before the first weights go to it: the rollout
        process continues from these states)."""
        if self._pending_rng is not None:
            dist_utils.restore_rng(self._pending_rng)
            self._pending_rng = None
        elif not self._seeded:
            rank, world = self.rank_and_world()
            if world > 1:  # one process keeps the global seed of seed_everything
                dist_utils.seed_rank(self.seed, rank)
        self._seeded = True

    def next_train_batch(self) -> RolloutBatch:
        """Roll out this rank's share of one iteration, applying the filter with re-rollout top-up (or,
        with a batch source, take the iteration's batch from it)."""
        if self.source is not None:
            batch = self.source.next_batch(self.iteration)
            self.iteration += 1
            return batch
        self.prepare_rng()
        it = self.iteration
        self.follow_curriculum(it)
        rank, world = self.rank_and_world()
        lo, hi = rank_share(self.plan.tasks_per_iteration, rank, world)
        target = hi - lo
        t0 = time.perf_counter()
        kept: list[Episode] = []
        kept_groups = filled_groups = 0
        rounds = 0
        total = RolloutStats()
        all_eps: list[Episode] = []
        schedule = self.schedule
        filtering = schedule.group_filter is not None and it >= schedule.cold_start
        while rounds < schedule.max_rollout_rounds and kept_groups < target:
            tasks, episodes = self._rollout_round(it, rounds, lo, hi)
            total.add(self.agent_loop.last_stats)
            all_eps.extend(episodes)
            rounds += 1
            if not filtering:
                kept, kept_groups = episodes, len(tasks)
                break
            keep_ids, fill_ids = self._filter_round(episodes, last=rounds == schedule.max_rollout_rounds)
            need = target - kept_groups
            chosen = (keep_ids + fill_ids)[:need]
            keep = set(chosen)
            kept.extend(e for e in episodes if e.group_id in keep)
            kept_groups += len(chosen)
            filled_groups += max(0, len(chosen) - len(keep_ids))
        self.iteration += 1
        seconds = time.perf_counter() - t0
        metrics = self._train_metrics(all_eps, kept_groups, filled_groups, filtering, rounds, total)
        if kept_groups - filled_groups < target and filtering:
            log.info("iteration %d: filter kept %d/%d groups after %d rounds (%d filled from the last round)",
                     it, kept_groups - filled_groups, target, rounds, filled_groups)
        tokens, turns = collate_episodes(kept, self.agent_loop.sample_mode, self.pad_id)
        return RolloutBatch(tokens, turns, it, seconds, metrics)

    def follow_curriculum(self, iteration: int) -> None:
        """Before the rollout of ``iteration``: hand the curriculum the validation that came since the last batch
        (the module's ``last_val``; none outside a Trainer, e.g. in the asynchronous rollout process, where only
        ``until_iteration`` stages are allowed) and draw by the weights of the stage in force."""
        if self.curriculum is None:
            return
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        seen = getattr(module, "last_val_iteration", None)
        values = None
        if seen is not None and seen != self.observed_validation and module.last_val:
            values, self.observed_validation = dict(module.last_val), seen
        before = self.curriculum.stage
        if self.curriculum.observe(iteration, values):
            log.info("curriculum: stage %d -> %d at iteration %d (weights %s)", before, self.curriculum.stage, iteration,
                     self.curriculum.weights())
        self.agent_loop.set_weights(self.curriculum.weights())

    def _rollout_round(self, it: int, rounds: int, lo: int, hi: int) -> tuple[list[Task], list[Episode]]:
        """(tasks, episodes) of this rank's groups ``[lo, hi)`` in rollout round ``rounds`` of
        iteration ``it``: ``group_size`` episodes a task, group ids unique over rounds and ranks."""
        plan = self.plan
        seeds = train_task_seeds(self.seed, it, rounds, plan.tasks_per_iteration)[lo:hi]
        base = rounds * plan.tasks_per_iteration + lo
        tasks = [Task(group_id=base + g, seed=s) for g, s in enumerate(seeds)]
        if not tasks:
            return tasks, []
        return tasks, self.agent_loop.run(tasks, plan.group_size, plan.sampling, first_episode_id=base * plan.group_size)

    def _train_metrics(
        self, all_eps: list[Episode], kept_groups: int, filled_groups: int, filtering: bool, rounds: int,
        stats: RolloutStats,
    ) -> Metrics:
        """The iteration's filter, speed and rollout metrics of this rank, with how each combines
        over ranks (counts and throughputs add up, the slowest rank's times); the episode
        statistics are over ``all_eps``, every episode rolled out (kept or not); ``stats`` sums
        the agent loop's timings over the iteration's rollout rounds."""
        gen_s, env_s = stats.generate_seconds, stats.env_seconds
        metrics = Metrics()
        metrics.sum("filter/kept_groups", kept_groups - filled_groups)
        metrics.sum("filter/filled_groups", filled_groups)
        metrics.same("filter/active", filtering)
        metrics.max("filter/rounds", rounds)
        metrics.max("perf/generate_s", gen_s)
        metrics.max("perf/env_s", env_s)
        metrics.sum("rollout/tokens_per_s", stats.generated_tokens / max(gen_s, 1e-9))
        if not stats.env_overlapped:  # else env_s is only the wait for steps that ran beside the decoding
            metrics.sum("rollout/env_steps_per_s", stats.env_steps / max(env_s, 1e-9))
        metrics.mean("rollout/rows_per_step", stats.rows_per_step)
        metrics.sum("rollout/env_worker_restarts", self.agent_loop.pool.restarts)
        metrics.sum("rollout/episodes", len(all_eps))
        # statistics of everything rolled out: the filter must not hide how the policy does
        metrics.update(episode_metrics(all_eps, "rollout/", graded=self.agent_loop.spec.graded))
        if isinstance(self.agent_loop, MixLoop):
            metrics.update(self._mix_metrics(all_eps))
        return metrics

    def _mix_metrics(self, all_eps: list[Episode]) -> Metrics:
        """A mix's rollout metrics per member (``rollout/<member>/*``, the same statistics as ``rollout/*``, and
        ``rollout/<member>/episodes``), and with a curriculum its stage and the weights in force
        (``curriculum/stage``, counted from 0, and ``curriculum/weight/<member>``)."""
        loop = self.agent_loop
        metrics = Metrics()
        for m in loop.members:
            eps = [e for e in all_eps if e.env_name == m.name]
            metrics.sum(f"rollout/{m.name}/episodes", len(eps))
            metrics.update(episode_metrics(eps, f"rollout/{m.name}/", graded=m.loop.spec.graded))
        if self.curriculum is not None:
            metrics.same("curriculum/stage", self.curriculum.stage)
            for name, weight in loop.weights.items():
                metrics.same(f"curriculum/weight/{name}", weight)
        return metrics

    def _filter_round(self, episodes: list[Episode], last: bool) -> tuple[list[int], list[int]]:
        """(group ids the filter keeps, and on the last round with ``fill_last_round`` the
        round's other groups in task order, to fill the batch with); episodes with an
        environment error count for neither."""
        usable = [e for e in episodes if not e.env_error]
        if not usable:
            return [], []
        turns = [t for e in usable for t in e.turns]
        valid_ratio = sum(t.valid for t in turns) / max(len(turns), 1)
        result = self.schedule.group_filter(
            returns=torch.tensor([e.ret for e in usable], dtype=torch.float32),
            group_ids=torch.tensor([e.group_id for e in usable], dtype=torch.long),
            valid_ratio=valid_ratio,
        )
        keep_ids = [int(g) for g in result.kept_group_ids.tolist()]
        if not (last and self.schedule.fill_last_round):
            return keep_ids, []
        keep = set(keep_ids)
        rest = list(dict.fromkeys(e.group_id for e in usable if e.group_id not in keep))
        return keep_ids, rest
