"""PDDL problem writer for generated games, in the layout of ALFWorld's ``initial_state.pddl``.

Ids are mangled as ALFRED does (``|`` -> ``_bar_``, ``-`` -> ``_minus_``, ``+`` -> ``_plus_``,
``.`` -> ``_dot_``, ``,`` -> ``_comma_``), so alfworld's ``AlfredDemangler`` turns
``Cabinet_bar__plus_00_dot_68...`` back into ``cabinet 2``. The goal is ALFRED's own goal formula
(``alfworld.gen.goal_library``) for the task type, with the task's object / receptacle / lamp types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arl.envs.alfworld.gen.household import GameSpec, Rules
from arl.envs.alfworld.gen.tables import OPENABLE, RECEPTACLE_OBJECTS

_MANGLE = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))


def mangle(name: str) -> str:
    """ALFRED's PDDL-safe spelling of an id: ``Mug|+00.32|...`` -> ``Mug_bar__plus_00_dot_32...``."""
    for char, word in _MANGLE:
        name = name.replace(char, word)
    return name


def demangle(name: str) -> str:
    """Inverse of :func:`mangle` (case preserved)."""
    for char, word in reversed(_MANGLE):
        name = name.replace(word, char)
    return name


def goal_pddl(spec: GameSpec, goal_library: Mapping[str, Any]) -> str:
    """The ``(:goal ...)`` block of ALFRED's goal library for ``spec.task`` (closes the define)."""
    t = spec.task
    text = goal_library[t.task_type]["pddl"].format(
        obj=t.object_target, recep=t.parent_target, toggle=t.toggle_target, mrecep=""
    )
    return text.replace("#", "-")  # the library writes "?o # object"


def problem_pddl(spec: GameSpec, rules: Rules, goal_library: Mapping[str, Any]) -> str:
    """The full PDDL problem of ``spec``: objects, initial state, goal."""
    receps = {r.rid: r for r in spec.plan.receptacles}
    used_receps = sorted(receps)
    otypes = sorted({t.otype for t in spec.things} | {spec.task.object_target} | ({spec.task.toggle_target} - {""}))
    rtypes = sorted({r.rtype for r in receps.values()} | ({spec.task.parent_target} - {""}))
    locations = sorted({r.location for r in receps.values()} | {spec.plan.agent_location})

    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in rtypes]
    objects += [f"{mangle(t.oid)} - object" for t in spec.things]
    objects += [f"{mangle(r)} - receptacle" for r in used_receps]
    objects += [f"{mangle(loc)} - location" for loc in locations]

    init: list[str] = []
    init += [f"(receptacleType {mangle(r)} {receps[r].rtype}Type)" for r in used_receps]
    init += [f"(objectType {mangle(t.oid)} {t.otype}Type)" for t in spec.things]
    init += [f"(canContain {rt}Type {ot}Type)" for rt in rtypes for ot in otypes if ot in rules.can_contain.get(rt, ())]
    toggleable = [t for t in spec.things if t.otype in rules.toggleable]
    init += [f"(pickupable {mangle(t.oid)})" for t in spec.things if t.otype not in rules.toggleable]
    init += [f"(isReceptacleObject {mangle(t.oid)})" for t in spec.things if t.otype in RECEPTACLE_OBJECTS]
    init += [f"(openable {mangle(r)})" for r in used_receps if receps[r].rtype in OPENABLE]
    init.append(f"(atLocation agent1 {mangle(spec.plan.agent_location)})")
    for fact, kinds in (
        ("cleanable", rules.cleanable),
        ("heatable", rules.heatable),
        ("coolable", rules.coolable),
        ("sliceable", rules.sliceable),
    ):
        init += [f"({fact} {mangle(t.oid)})" for t in spec.things if t.otype in kinds]
    init += [f"(toggleable {mangle(t.oid)})" for t in toggleable]
    init += [f"(inReceptacle {mangle(t.oid)} {mangle(t.receptacle)})" for t in spec.things]
    init += [f"(receptacleAtLocation {mangle(r)} {mangle(receps[r].location)})" for r in used_receps]
    init += [f"(objectAtLocation {mangle(t.oid)} {mangle(receps[t.receptacle].location)})" for t in spec.things]

    pad = "\n        "
    return (
        f"\n(define (problem plan_{spec.task_id})\n(:domain alfred)\n(:objects{pad}"
        + pad.join(objects)
        + "\n        )\n\n(:init"
        + pad
        + pad.join(init)
        + "\n        )\n"
        + goal_pddl(spec, goal_library)
    )
