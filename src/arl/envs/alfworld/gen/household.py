"""Procedural ALFRED households and tasks: pure, deterministic functions of a seed.

A *floor plan* (room kind + ALFRED floor plan number) fixes the furniture: which receptacles the
room has, their ALFRED-style ids (``Cabinet|+00.68|+00.50|-02.20``) and their navigation points
(``loc|4|-3|1|45``). A *game* puts objects into a floor plan and poses one of the six tasks; it is
a function of (split, index, attempt) only. Nothing here touches the engine; the rules of what may
go where (``canContain``, heatable, coolable, cleanable) come in as a :class:`Rules` value built
from ``alfworld.gen.constants`` (see :func:`rules_from_alfworld`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arl.envs.alfworld.gen import tables

GENERATOR_VERSION = 1

# Game seeds of each split: disjoint ranges (train 0.., valid_seen 10^7.., valid_unseen 2*10^7..).
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "valid_seen": 10_000_000, "valid_unseen": 20_000_000}
SPLITS = tuple(SPLIT_SEED_BASE)
MAX_GAMES_PER_SPLIT = 10_000_000


@dataclass(frozen=True)
class Rules:
    """ALFRED's affordances: ``can_contain[rtype]`` is the set of object types it may hold."""

    can_contain: Mapping[str, frozenset[str]]
    heatable: frozenset[str]
    coolable: frozenset[str]
    cleanable: frozenset[str]
    sliceable: frozenset[str]
    toggleable: frozenset[str]


def rules_from_alfworld(constants: Any) -> Rules:
    """:class:`Rules` from ``alfworld.gen.constants`` (VAL_RECEPTACLE_OBJECTS, VAL_ACTION_OBJECTS)."""
    actions = constants.VAL_ACTION_OBJECTS
    return Rules(
        can_contain={r: frozenset(objs) for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items()},
        heatable=frozenset(actions["Heatable"]),
        coolable=frozenset(actions["Coolable"]),
        cleanable=frozenset(actions["Cleanable"]),
        sliceable=frozenset(actions["Sliceable"]),
        toggleable=frozenset(actions["Toggleable"]),
    )


@dataclass(frozen=True)
class Receptacle:
    """A piece of furniture: ALFRED id, type, and the navigation point in front of it."""

    rid: str
    rtype: str
    location: str


@dataclass(frozen=True)
class Thing:
    """An object of the household and the receptacle it starts in."""

    oid: str
    otype: str
    receptacle: str  # rid


@dataclass(frozen=True)
class FloorPlan:
    """The furniture of one ALFRED-numbered room."""

    kind: str
    number: int
    receptacles: tuple[Receptacle, ...]
    agent_location: str


@dataclass(frozen=True)
class Task:
    """The goal of a game, in ALFRED's ``pddl_params`` terms (CamelCase types, "" when unused)."""

    task_type: str
    object_target: str
    parent_target: str
    toggle_target: str
    description: str  # e.g. "put a clean mug in coffeemachine"


@dataclass(frozen=True)
class GameSpec:
    """Everything one generated game is made of."""

    split: str
    index: int
    attempt: int
    plan: FloorPlan
    things: tuple[Thing, ...]
    task: Task

    @property
    def game_seed(self) -> int:
        return SPLIT_SEED_BASE[self.split] + self.index

    @property
    def task_id(self) -> str:
        """ALFRED-style trial id, unique per (split, index)."""
        return f"trial_G{self.game_seed:08d}"

    @property
    def task_dir(self) -> str:
        """ALFRED's task folder name: ``<type>-<Object>-<MRecep>-<Parent or Toggle>-<plan>``."""
        t = self.task
        last = t.toggle_target if t.task_type == "look_at_obj_in_light" else t.parent_target
        return f"{t.task_type}-{t.object_target}-None-{last}-{self.plan.number}"


# ----------------------------------------------------------------------------------- ids
def _coord(rng: random.Random, low: float, high: float) -> str:
    """An ALFRED coordinate field: sign, two integer digits, two decimals (``+01.36``)."""
    return f"{rng.uniform(low, high):+06.2f}"


def _unique_id(rng: random.Random, prefix: str, used: set[str], suffix: str = "") -> str:
    for _ in range(1000):
        rid = f"{prefix}|{_coord(rng, -4, 4)}|{_coord(rng, 0, 2.2)}|{_coord(rng, -4, 4)}{suffix}"
        if rid not in used:
            used.add(rid)
            return rid
    raise RuntimeError("could not draw a unique id")  # pragma: no cover - 1000 collisions


def _unique_location(rng: random.Random, used: set[str]) -> str:
    for _ in range(1000):
        loc = f"loc|{rng.randint(-12, 12)}|{rng.randint(-12, 12)}|{rng.randint(0, 3)}|{rng.choice((-30, 0, 15, 30, 45, 60))}"
        if loc not in used:
            used.add(loc)
            return loc
    raise RuntimeError("could not draw a unique location")  # pragma: no cover


# ---------------------------------------------------------------------------- floor plans
def floor_plan(kind: str, plan_index: int) -> FloorPlan:
    """The furniture of ALFRED-style floor plan ``plan_index`` (1..30) of room ``kind``.

    Deterministic: the same (kind, index) always gives the same room.
    """
    number = tables.floor_plan_number(kind, plan_index)
    rng = random.Random(f"arl-alfworld/v{GENERATOR_VERSION}/plan/{number}")
    ids: set[str] = set()
    locations: set[str] = set()
    receptacles = []
    for rtype, (low, high) in tables.RECEPTACLES[kind].items():
        for _ in range(rng.randint(low, high)):
            if rtype == "SinkBasin":  # ALFRED: the basin is a part of the sink
                rid = _unique_id(rng, "Sink", ids, "|SinkBasin")
            elif rtype == "BathtubBasin":
                rid = _unique_id(rng, "Bathtub", ids, "|BathtubBasin")
            else:
                rid = _unique_id(rng, rtype, ids)
            receptacles.append(Receptacle(rid, rtype, _unique_location(rng, locations)))
    return FloorPlan(kind, number, tuple(receptacles), _unique_location(rng, locations))


def plan_indices(split: str) -> range:
    """Floor plan indices a split draws from (valid_unseen holds out plans 26..30)."""
    if split not in SPLIT_SEED_BASE:
        raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    return tables.UNSEEN_PLAN_INDICES if split == "valid_unseen" else tables.SEEN_PLAN_INDICES


# ---------------------------------------------------------------------------------- games
def _place(
    rng: random.Random, otype: str, receps: list[Receptacle], rules: Rules, banned: frozenset[str]
) -> Receptacle | None:
    """A receptacle for one object of ``otype``: usually a usual place, always an allowed one."""
    allowed = [r for r in receps if otype in rules.can_contain.get(r.rtype, ()) and r.rtype not in banned]
    if not allowed:
        return None
    usual = tables.USUAL_PLACES.get(otype, ())
    preferred = [r for r in allowed if r.rtype in usual]
    if preferred and rng.random() < 0.85:
        # earlier usual places are likelier: weight by rank
        weights = [len(usual) - usual.index(r.rtype) for r in preferred]
        return rng.choices(preferred, weights=weights)[0]
    return rng.choice(allowed)


def _goal_receptacles(task_type: str, otype: str, present: set[str], rules: Rules) -> list[str]:
    banned = tables.NEVER_A_GOAL | tables.NOT_A_GOAL.get(task_type, frozenset())
    return sorted(r for r in present if r not in banned and otype in rules.can_contain.get(r, ()))


def _target_candidates(task_type: str, kind: str, present: set[str], rules: Rules) -> list[str]:
    needs = {
        "pick_clean_then_place_in_recep": rules.cleanable,
        "pick_heat_then_place_in_recep": rules.heatable,
        "pick_cool_then_place_in_recep": rules.coolable,
    }.get(task_type)
    out = []
    for otype in tables.OBJECTS[kind]:
        if needs is not None and otype not in needs:
            continue
        starts = [r for r in present if otype in rules.can_contain.get(r, ())]
        if not starts:
            continue
        if task_type != "look_at_obj_in_light":
            goals = _goal_receptacles(task_type, otype, present, rules)
            # the object must be able to start somewhere that is not a goal receptacle
            if not goals or not [r for r in starts if r not in goals or len(goals) > 1]:
                continue
        out.append(otype)
    return out


def describe_task(
    task_type: str, obj: str, recep: str, toggle: str, templates: Mapping[str, Any], rng: random.Random
) -> str:
    """ALFWorld's templated goal text (``alfworld.gen.goal_library`` templates, lower-cased types)."""
    template = rng.choice(templates[task_type]["templates"])
    return template.format(obj=obj.lower(), recep=recep.lower(), toggle=toggle.lower(), mrecep="")


def sample_game(split: str, index: int, rules: Rules, goal_library: Mapping[str, Any], attempt: int = 0) -> GameSpec:
    """The game ``index`` of ``split`` (attempt ``attempt``): household, objects and task.

    The task type cycles through :data:`tables.TASK_TYPES` with ``index`` (so any 6 consecutive
    indices cover all six types); everything else is drawn from a seed of (split, index, attempt).
    Invariants: the goal does not hold initially, target objects never start in a goal-type
    receptacle (nor in the microwave / fridge of a heat / cool task), every placement is allowed
    by ALFRED's ``canContain``, pick_two games hold at least two target objects.
    """
    if not 0 <= index < MAX_GAMES_PER_SPLIT:
        raise ValueError(f"game index must be in [0, {MAX_GAMES_PER_SPLIT}), got {index}")
    indices = plan_indices(split)
    task_type = tables.TASK_TYPES[index % len(tables.TASK_TYPES)]
    seed = SPLIT_SEED_BASE[split] + index
    rng = random.Random(f"arl-alfworld/v{GENERATOR_VERSION}/game/{seed}/{attempt}")
    for _ in range(100):
        kind = rng.choice(tables.TASK_ROOMS[task_type])
        plan = floor_plan(kind, rng.choice(list(indices)))
        populated = _populate(rng, plan, task_type, rules, goal_library)
        if populated is not None:
            return GameSpec(split, index, attempt, plan, *populated)
    raise RuntimeError(f"no valid household for {task_type} (split {split}, index {index})")  # pragma: no cover


def _distractors(rng, kind: str, obj: str, receps: list, rules: Rules, ids: set) -> list[Thing]:
    """Objects of the room's other types (not ``obj``) placed on receptacles (``ids``: the ids
    taken, the new ones added)."""
    things = []
    others = [o for o in tables.OBJECTS[kind] if o != obj]
    for otype in rng.sample(others, k=min(len(others), rng.randint(7, 12))):
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            where = _place(rng, otype, receps, rules, frozenset())
            if where is not None:
                things.append(Thing(_unique_id(rng, otype, ids), otype, where.rid))
    return things


def _populate(rng, plan: FloorPlan, task_type, rules: Rules, goal_library) -> tuple[tuple[Thing, ...], Task] | None:
    """The things of a household on ``plan`` and its task of ``task_type`` (sorted by object id), or None
    when the draw left no valid placement."""
    receps = list(plan.receptacles)
    present = {r.rtype for r in receps}
    targets = _target_candidates(task_type, plan.kind, present, rules)
    if not targets:
        return None
    obj = rng.choice(targets)
    toggle = parent = ""
    ids = {r.rid for r in receps}
    things: list[Thing] = []
    if task_type == "look_at_obj_in_light":
        lamps = [lamp for lamp in tables.LAMPS if any(r.rtype in tables.LAMP_HOSTS[lamp] for r in receps)]
        if not lamps:
            return None
        toggle = rng.choice(lamps)
        banned_for_target = frozenset()
    else:
        parent = rng.choice(_goal_receptacles(task_type, obj, present, rules))
        tool = {"pick_heat_then_place_in_recep": "Microwave", "pick_cool_then_place_in_recep": "Fridge"}.get(task_type)
        banned_for_target = frozenset({parent} | ({tool} if tool else set()))

    # lamps: the toggle target (look tasks) and, sometimes, decoration in living rooms / bedrooms
    lamp_types = [toggle] if toggle else []
    if plan.kind in ("LivingRoom", "Bedroom") and rng.random() < 0.5:
        lamp_types.append(rng.choice(tables.LAMPS))
    for lamp in lamp_types:
        hosts = [r for r in receps if r.rtype in tables.LAMP_HOSTS[lamp]]
        if not hosts:
            if lamp == toggle:
                return None
            continue
        things.append(Thing(_unique_id(rng, lamp, ids), lamp, rng.choice(hosts).rid))

    # the target objects
    n_target = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
    for _ in range(n_target):
        where = _place(rng, obj, receps, rules, banned_for_target)
        if where is None:
            return None
        things.append(Thing(_unique_id(rng, obj, ids), obj, where.rid))

    things += _distractors(rng, plan.kind, obj, receps, rules, ids)
    description = describe_task(task_type, obj, parent, toggle, goal_library, rng)
    task = Task(task_type, obj, parent, toggle, description)
    return tuple(sorted(things, key=lambda t: t.oid)), task


def traj_data(spec: GameSpec) -> dict[str, Any]:
    """The ``traj_data.json`` of a generated game (the fields ALFWorld reads, ALFRED's layout)."""
    t = spec.task
    return {
        "task_id": spec.task_id,
        "task_type": t.task_type,
        "pddl_params": {
            "object_target": t.object_target,
            "parent_target": t.parent_target,
            "toggle_target": t.toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "turk_annotations": {
            "anns": [{"task_desc": t.description[:1].upper() + t.description[1:] + ".", "high_descs": [], "votes": []}]
        },
        "scene": {
            "floor_plan": f"FloorPlan{spec.plan.number}",
            "scene_num": spec.plan.number,
            "room_kind": spec.plan.kind,
            "generator": f"arl-alfworld-gen v{GENERATOR_VERSION}",
            "split": spec.split,
            "index": spec.index,
            "attempt": spec.attempt,
        },
    }
