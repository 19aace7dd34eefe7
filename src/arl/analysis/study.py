"""A study of the findings spec: its archive's runs and configs, its measures, its env's task.

A :class:`Study` (one entry of ``studies:`` in ``docs/results/findings.yaml``) reads its archive's
runs (:func:`arl.analysis.runs.find_runs`) and their saved configs, says what the configs hold
(:attr:`Study.facts`: temperatures, sizes, seeds, the start, and the env's description from
:data:`ENV_KINDS`), gives a measure of :data:`MEASURE_KINDS` per setting and seed and a planned
contrast with its Holm p over the study's family (:meth:`Study.contrast`), and what the archive
holds and lacks (:attr:`Study.completeness`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from arl.analysis.contrasts import Contrast, holm, paired_p, plural
from arl.analysis.runs import Run, event_files, find_runs, read_config, scalar_tags, seed_of, values_by_setting
from arl.analysis.stats import _seed_key, contrast_values, parse_contrast
from arl.analysis.tables import MEASURES
from arl.utils.config import lookup

# --------------------------------------------------------------------------- measures


@dataclass(frozen=True)
class Measure:
    """What a paired contrast compares per run, and how the page names it."""

    short: str  # the cell's name, with {T} (training) or {VT} (validation) filled from the configs
    value: Callable[[Run], float | None]
    describe: str  # the full definition, with the config fields of :meth:`Study.facts`
    # whether one setting's own value means something against 0 (a gain does; a success rate does not),
    # so that a contrast of one setting ("algo=sampo") belongs to this measure's family
    against_zero: bool = False
    # for a finding of the paper: whether this is the paper's metric (final validation success), or
    # ours only (training episodes at T 1.0); None where it is neither said nor needed
    paper: bool | None = None
    # the validation scalar a gain is read against at iteration 0 (the start's spread beside a gain), and
    # the factor that puts it on the measure's scale
    start_tag: str = "val/success_rate"
    start_scale: float = 1.0


#: WebShop's score (the mean final reward x 100) and the factor that puts it on success's scale
SCORE_TAG, SCORE_SCALE = "val/score", 0.01


def _scaled(tag: str, of: Callable[[Run, str], float | None], scale: float) -> Callable[[Run], float | None]:
    def value(run: Run) -> float | None:
        v = of(run, tag)
        return None if v is None else v * scale

    return value


def _window_mean(tag: str, first: int, last: int) -> Callable[[Run], float | None]:
    def value(run: Run) -> float | None:
        s = [v for step, v in run.scalars.get(tag, []) if first <= step <= last and math.isfinite(v)]
        return statistics.fmean(s) if s else None

    return value


MEASURE_KINDS: dict[str, Measure] = {
    "final": Measure("final success (T {val_T})", MEASURES["final validation success"],
                     "final validation success: `val/success_rate` at iteration {iterations}, {val_episodes} "
                     "{held_out} sampled at {VT}", paper=True),
    "gain": Measure("gain over the start (T {val_T})", MEASURES["gain over the start"],
                    "gain over the start: `val/success_rate` at iteration {iterations} minus at iteration 0 (the "
                    "start policy), the same {val_episodes} {held_out} sampled at {VT}", against_zero=True),
    # WebShop's second metric: the paper's score (mean final reward x 100), here / 100 so that it reads on
    # success's scale (a win scores 1, a near miss its share of the goal's attributes, options and price)
    "score-gain": Measure("score gain over the start (T {val_T})", _scaled(SCORE_TAG, Run.gain, SCORE_SCALE),
                          "score gain over the start: `val/score` / 100 (the mean final reward, on [0, 1]) at "
                          "iteration {iterations} minus at iteration 0, the same {val_episodes} {held_out} sampled at "
                          "{VT}", against_zero=True, start_tag=SCORE_TAG, start_scale=SCORE_SCALE),
    "training": Measure("training success ({T})", MEASURES["mean training success over the run"],
                        "training success: `rollout/success_rate` (every episode an iteration played, re-rolled "
                        "rounds included) at {T}, mean over the {iterations} iterations", paper=False),
    "training-valid": Measure("training valid-action ratio ({T})", MEASURES["mean training valid-action ratio over the run"],
                              "training valid-action ratio: `rollout/valid_action_ratio` at {T}, mean over the "
                              "{iterations} iterations", paper=False),
    "training-early": Measure("training success, iterations 2-6 ({T})", _window_mean("rollout/success_rate", 2, 6),
                              "early training success: `rollout/success_rate` at {T}, mean over iterations 2-6 "
                              "(the rollouts after the first five updates; iteration 1 plays the start policy)"),
    "iteration-seconds": Measure("seconds an iteration", lambda r: r.mean("perf/iteration_s"),
                                 "seconds an iteration: `perf/iteration_s`, mean over the run (two runs side by side)"),
}


# --------------------------------------------------------------------------- studies and archives


def _holds_scalars(events: Path, prefix: str = "rollout/") -> bool:
    return any(t.startswith(prefix) for t in scalar_tags(events))


@dataclass(eq=False)  # identity: a study is hashed and compared as itself
class Study:
    key: str
    title: str
    archive: Path
    command: str
    names: dict[str, str]
    report: Path | None = None
    family: list[str] = field(default_factory=list)
    measures: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    peers: list[Study] = field(default_factory=list, repr=False)  # the spec's studies, this one among them

    @property
    def short(self) -> str:
        return self.title.split(":")[0]

    @cached_property
    def runs(self) -> list[Run]:
        return [r for r in find_runs(self.archive) if not r.bc_only]

    def config(self, run: Run) -> dict:
        return self._configs[run.name]

    @cached_property
    def _configs(self) -> dict[str, dict]:
        return {r.name: read_config(self.archive / r.name) for r in self.runs}

    def select(self, seeds: set[str] | None = None) -> list[Run]:
        return [r for r in self.runs if seeds is None or seed_of(r) in seeds]

    def name(self, setting: str) -> str:
        return self.names.get(setting, setting)

    def contrast_name(self, spec: str) -> str:
        terms = parse_contrast(spec)
        out = ""
        for i, (sign, name) in enumerate(terms):
            out += ("" if sign > 0 else "-") if i == 0 else (" + " if sign > 0 else " - ")
            out += self.name(name)
        return out

    def config_values(self, path: str) -> list:
        """The distinct values at ``a.b.c`` of the runs' configs, in the runs' order (None where a
        config lacks it; lists kept as lists)."""
        values: dict[str, object] = {}
        for r in self.runs:
            node = lookup(self.config(r), path)  # under its old name in a run archived before a rename
            values.setdefault(str(node), node)
        return list(values.values())

    def _shared(self, path: str) -> str:
        """The config value at ``a.b.c`` every run shares, or its values joined by `` / `` when they differ."""
        return " / ".join(str(v) for v in self.config_values(path))

    @cached_property
    def facts(self) -> dict[str, str]:
        """What the runs' configs say: temperatures, sizes, the regime (every run the same, or each
        value), and the env's description (:data:`ENV_KINDS`: ``task``, ``task_scale``, ``held_out``)."""
        g = self._shared
        vt = f"T {g('rollout.val_temperature')}, top-p {g('rollout.val_top_p')}, top-k {_top_k(g('rollout.val_top_k'))}"
        seeds = sorted({seed_of(r) for r in self.runs}, key=_seed_key)
        return {
            "T": f"T {g('rollout.temperature')}", "VT": vt, "val_T": g("rollout.val_temperature"),
            "iterations": g("rl.iterations"), "val_episodes": g("rollout.val_episodes"),
            "val_every": g("rl.val_every"), "lr": g("rl.optimizer.lr"),
            "mini_batches": g("rl.mini_batches"), "groups": g("rollout.tasks_per_iteration"),
            "group_size": g("rollout.group_size"), "model": g("model.name"), "env": g("env.name"),
            "turns": g("env.max_turns"), "seeds": ", ".join(seeds),
            "n_seeds": str(len(seeds)), "start": _start_name(g("model.init_from")),
            "kl_threshold": g("callbacks.collapse.kl_threshold"),
            **ENV_KINDS.get(g("env.name"), _any_env)(self),
        }

    def fill(self, text: str) -> str:
        return text.format(**self.facts)

    @property
    def scale(self) -> str:
        """What the study ran, from its runs: the model and its parameters, the task, the optimiser
        steps and training episodes a run, the validation, the seeds, the start's spread over them
        and how many runs ended below it (:meth:`scale_parts`)."""
        return "; ".join(self.scale_parts().values())

    def scale_parts(self) -> dict[str, str]:
        """The parts of :attr:`scale`: ``model``, ``task``, ``steps``, ``episodes``, ``validation``,
        ``seeds``, ``start``, ``below``."""
        f = self.facts
        seeds = plural(f["n_seeds"], "paired seed") if f["n_seeds"] != "1" else "1 seed"
        params = self.parameters
        lo, hi = self.start_range()
        below, n = self.below_start()
        return {
            "model": f"{f['model']} model" + (f" ({params / 1e6:.2f}M parameters)" if params else ""),
            "task": f["task_scale"],
            "steps": f"{f['iterations']} iterations at lr {f['lr']}, {self.steps_text()}",
            "episodes": "training episodes a run: " + self._episodes(),
            "validation": f"validation: {f['val_episodes']} {f['held_out']} at {f['VT']}",
            "seeds": f"{seeds} ({f['seeds']})",
            "start": f"the start policy scored {_span([lo, hi], '.3f')} at iteration 0 over these sampling seeds",
            "below": f"{below} of {plural(n, 'run')} ended below their start",
        }

    def steps_text(self) -> str:
        """``"60 optimiser steps a run (`rl.mini_batches` 2 a rollout)"``, ``"28-34 optimiser steps a run
        (`rl.mini_batch_size` 256 samples a step)"``: the steps the runs logged, and the setting that
        sized them (a fixed count a rollout, or one step per so many samples, which gives a rollout of more
        turns more steps)."""
        steps = [v for v in self.optimizer_steps().values() if v is not None]
        size = self._shared("rl.mini_batch_size")
        sizing = (f"`rl.mini_batch_size` {size} samples a step" if size not in ("None", "") else
                  f"`rl.mini_batches` {self.facts['mini_batches']} a rollout")
        return f"{_span(steps) + ' optimiser steps a run' if steps else 'optimiser steps not logged'} ({sizing})"

    def _episodes(self) -> str:
        """``"GRPO 1920, SAMPO 3328-3456"``, ``"GiGPO / GRPO 3840, ..."``: each setting's training episodes a run (``rollout/episodes``
        summed), settings with the same span named together, ``"1280 (every run)"`` when all share one."""
        spans: dict[str, list[str]] = {}
        for g, v in self.per_setting(lambda r: r.total("rollout/episodes")).items():
            spans.setdefault(_span(v), []).append(self.name(g))
        if not spans:
            return "not logged"
        if len(spans) == 1:
            return f"{next(iter(spans))} (every run)"
        return ", ".join(f"{' / '.join(names)} {span}" for span, names in spans.items())

    def per_setting(self, value: Callable[[Run], float | None]) -> dict[str, list[float]]:
        """Setting -> the value of each of its runs (None left out), settings in the runs' order."""
        out: dict[str, list[float]] = {}
        for r in self.runs:
            v = value(r)
            if v is not None:
                out.setdefault(r.group, []).append(v)
        return out

    def optimizer_steps(self) -> dict[str, float | None]:
        """Run name -> the optimiser steps it took (``train/optimizer_steps``, a running count; else the
        sum of ``actor/optimizer_steps``, the steps of each iteration; None when it logged neither)."""
        out = {}
        for r in self.runs:
            running = r.scalars.get("train/optimizer_steps")
            out[r.name] = running[-1][1] if running else r.total("actor/optimizer_steps")
        return out

    def start_range(self, seeds: set[str] | None = None, tag: str = "val/success_rate",
                    scale: float = 1.0) -> tuple[float, float]:
        """The lowest and highest validation value ``tag`` (success) at iteration 0 (the start policy), times
        ``scale``, over the runs of ``seeds``: the same weights, sampled with each seed."""
        starts = [v * scale for v in (r.first(tag) for r in self.select(seeds)) if v is not None]
        return min(starts), max(starts)

    def below_start(self) -> tuple[int, int]:
        """(runs whose last validation success is below their first, runs)."""
        pairs = [(r.first("val/success_rate"), r.final("val/success_rate")) for r in self.runs]
        return sum(1 for a, b in pairs if a is not None and b is not None and b < a), len(pairs)

    @cached_property
    def parameters(self) -> int | None:
        """The model's parameters, counted in an archived start's weights
        (``<archive>/../bc_start/bc_policy_hf/model.safetensors``) of this study or of another study of
        the spec whose runs have the same model config and env; None when no archive holds such weights."""
        mine = self._model_key()
        for study in [self, *self.peers]:
            weights = study.archive.parent / "bc_start" / "bc_policy_hf" / "model.safetensors"
            if weights.exists() and study.runs and study._model_key() == mine:
                return safetensors_parameters(weights)
        return None

    def _model_key(self) -> str:
        return json.dumps([self.config_values("model.name"), self.config_values("model.tiny"),
                           self.config_values("env.name")], sort_keys=True, default=str)

    def by_setting(self, measure: str, seeds: set[str] | None = None) -> dict[str, dict[str, float]]:
        """Setting -> {seed: the measure} over the runs of ``seeds`` (all when None)."""
        key = (measure, frozenset(seeds) if seeds is not None else None)
        if key not in self._values:
            self._values[key] = values_by_setting(self.select(seeds), MEASURE_KINDS[measure].value)
        return self._values[key]

    @cached_property
    def _values(self) -> dict:
        return {}

    def family_for(self, measure: str) -> list[str]:
        """The planned contrasts that apply to ``measure``: all of them, except that a contrast of one
        setting belongs only to a measure whose value means something against 0 (a gain)."""
        return [c for c in self.family if len(parse_contrast(c)) > 1 or MEASURE_KINDS[measure].against_zero]

    @property
    def holm_measures(self) -> list[str]:
        """The measures whose planned contrasts form one Holm family together (``holm_over_measures``
        in the spec): a study with one planned comparison tests it on several measures, and those
        tests are corrected together; [] (the default): a family per measure."""
        return [m for m in self.extra.get("holm_over_measures") or [] if m in self.measures]

    def tests_for(self, measure: str) -> list[tuple[str, str]]:
        """(contrast, measure) of the Holm family that ``measure``'s contrasts belong to."""
        measures = self.holm_measures if measure in self.holm_measures else [measure]
        return [(c, m) for m in measures for c in self.family_for(m)]

    def family_label(self, measure: str) -> str:
        """``"6 contrasts"``; ``"2 tests (SAMPO - GRPO on final success and training success)"`` for a
        family over measures."""
        tests = self.tests_for(measure)
        if len({m for _, m in tests}) == 1:
            return plural(len(tests), "contrast")
        names = " and ".join(MEASURE_KINDS[m].short.split(" (")[0] for m in dict.fromkeys(m for _, m in tests))
        contrasts = ", ".join(self.contrast_name(c) for c in dict.fromkeys(c for c, _ in tests))
        return f"{plural(len(tests), 'test')} ({contrasts} on {names})"

    def contrast(self, spec: str, measure: str, seeds: set[str] | None = None) -> Contrast:
        per_seed = contrast_values(parse_contrast(spec), self.by_setting(measure, seeds))
        tests = list(dict.fromkeys([*self.tests_for(measure), (spec, measure)]))
        ps = [paired_p(list(contrast_values(parse_contrast(c), self.by_setting(m, seeds)).values()))
              for c, m in tests]
        return Contrast(self, spec, measure, per_seed, holm(ps)[tests.index((spec, measure))], len(tests))

    @cached_property
    def completeness(self) -> dict:
        """What the archive holds per run: results records, per-game episodes, resumed / reloaded records."""
        dirs = [self.archive / r.name for r in self.runs]
        records = [d for d in dirs if (d / "rl_results.json").exists()]
        resumed, reloaded = [], []
        for d in records:
            rec = json.loads((d / "rl_results.json").read_text())
            if "resumed_from" in rec:
                files = event_files(d / "tensorboard" / "rl")
                # a reload of a finished run writes its record again and trains nothing: its newest
                # event file holds no rollout
                (reloaded if files and not _holds_scalars(files[-1]) else resumed).append(d)
        return {"runs": len(dirs), "records": len(records), "episodes": sum((d / "val_episodes").is_dir() for d in dirs),
                "resumed": resumed, "reloaded": reloaded,
                "finished": sum(_last_step(r, "rollout/success_rate") == (self.config(r).get("rl") or {}).get("iterations")
                                for r in self.runs)}


# --------------------------------------------------------------------------- envs
# Each env kind describes a study's task from its runs' configs: ``task`` (the setup block's words),
# ``task_scale`` (the scale line's) and ``held_out`` (what a validation plays).


def _listed(values: list, every: str) -> str:
    """Config lists as the page names them: ``"a, b"``; ``every`` for null (all); the runs' values
    joined by `` / `` where they differ."""
    return " / ".join(every if v is None else ", ".join(map(str, v)) if isinstance(v, list) else str(v)
                      for v in values)


def _sokoban(study: Study) -> dict[str, str]:
    """Sokoban: the room, the boxes and the turns; validation on held-out levels."""
    g = study._shared
    room = g("env.kwargs.dim_room").strip("[]").replace(", ", "x")
    boxes, turns = plural(g("env.kwargs.num_boxes"), "box"), g("env.max_turns")
    return {"room": room, "boxes": g("env.kwargs.num_boxes"), "task": f"Sokoban {room}, {boxes}, {turns} turns",
            "task_scale": f"Sokoban {room} with {boxes} and {turns} turns", "held_out": "held-out levels"}


def _math_tool(study: Study) -> dict[str, str]:
    """math_tool: the generated problems' templates (``env.kwargs.templates``, null: every one) or
    the dataset's file (``env.kwargs.data_path``), and the turns; validation on held-out problems."""
    templates, data = study.config_values("env.kwargs.templates"), study._shared("env.kwargs.data_path")
    if data != "None":
        what = f"problems of `{Path(data).name}`"
    elif templates == [None]:
        what = "generated problems of every template"
    else:
        what = f"generated problems of templates {_listed(templates, 'every template')}"
    turns = study._shared("env.max_turns")
    return {"task": f"math_tool, {what}, {turns} turns", "task_scale": f"math_tool ({what}) with {turns} turns",
            "held_out": "held-out problems"}


def _alfworld(study: Study) -> dict[str, str]:
    """ALFWorld: the task types (``env.kwargs.task_types``, null: all six) and the turns;
    validation on held-out games."""
    types, turns = study.config_values("env.kwargs.task_types"), study._shared("env.max_turns")
    if types == [None]:
        task, what = f"ALFWorld, all six task types, {turns} turns", "all six task types"
    else:
        what = f"task types {_listed(types, 'all six')}"
        task = f"ALFWorld {what}, {turns} turns"
    return {"task": task, "task_scale": f"ALFWorld ({what}) with {turns} turns", "held_out": "held-out games"}


def _webshop(study: Study) -> dict[str, str]:
    """WebShop: the shop (WebShop's files, or the generated one: ``env.kwargs.n_products`` products of
    ``goals_per_product`` goals each) and the turns; validation on held-out tasks (shopping goals)."""
    g = study._shared

    def given(key: str) -> bool:  # a run config keeps `${oc.env:WEBSHOP_DATA,null}` unresolved: the study
        value = g(key)            # scripts never set that variable, so it counts as unset
        return value not in ("None", "") and not value.startswith("${")

    turns = g("env.max_turns")
    if given("env.kwargs.data_dir") or given("env.kwargs.products_path"):
        shop = "WebShop's products and goals"
    else:
        shop = (f"a generated shop of {g('env.kwargs.n_products')} products, "
                f"{plural(g('env.kwargs.goals_per_product'), 'goal')} a product")
    return {"task": f"WebShop, {shop}, {turns} turns", "task_scale": f"WebShop ({shop}) with {turns} turns",
            "held_out": "held-out tasks"}


def _any_env(study: Study) -> dict[str, str]:
    """An env without a kind of its own: its name and turns; validation on held-out games."""
    name, turns = study._shared("env.name"), study._shared("env.max_turns")
    return {"task": f"{name}, {turns} turns", "task_scale": f"{name} with {turns} turns", "held_out": "held-out games"}


#: ``env.name`` -> the description of a study's task (others: :func:`_any_env`)
ENV_KINDS: dict[str, Callable[[Study], dict[str, str]]] = {
    "sokoban": _sokoban, "math_tool": _math_tool, "alfworld": _alfworld, "webshop": _webshop,
}


def _top_k(value: str) -> str:
    """A config's top-k as the page says it: ``off`` for 0 or -1 (no top-k cut), else the number."""
    return "off" if value in ("0", "-1") else value


def _start_name(init_from: str) -> str:
    """A BC start's folder as the study scripts name it, without the checkout that ran it:
    ``study/bc_start_long`` for ``<checkout>/logs/study/bc_start_long/bc_policy_hf``,
    ``docs/results/alfworld_cpu_study/bc_start`` for a start committed beside an archive
    (``<checkout>/docs/results/alfworld_cpu_study/bc_start/bc_policy_hf``)."""
    if "/logs/" in init_from:
        path = init_from.split("/logs/", 1)[-1]
    elif "/docs/" in init_from:
        path = "docs/" + init_from.split("/docs/", 1)[-1]
    else:
        path = init_from
    return path.removesuffix("/bc_policy_hf")


def _span(values, fmt: str = ".0f") -> str:
    """``"60"`` when the values are equal, else ``"28-36"`` (lowest-highest), each in ``fmt``."""
    values = list(values)
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def safetensors_parameters(path: Path) -> int:
    """The parameters a ``.safetensors`` file holds: the product of each tensor's shape, summed,
    read from the file's header (8 bytes of little-endian length, then JSON) without loading it."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def _last_step(run: Run, tag: str) -> int | None:
    s = run.scalars.get(tag)
    return s[-1][0] if s else None
