"""Level generation by reverse play, so every generated level is solvable.

1. A rectangular room with a wall border; ``internal_walls`` random wall cells are added inside,
   each kept only if the floor stays connected.
2. ``num_boxes`` targets are drawn on the floor; the boxes start on them (the solved state).
3. The player walks ``search_depth`` random steps *backwards*: a reverse step moves the player
   to a free neighbour and, when a box sits right behind the player, may pull it along (the
   reverse of a push). Replaying the walk forwards therefore solves the level.
4. Of all states seen during the walk with at least one box off target, the one with the largest
   total box displacement (Manhattan distance of each box from its own target), ties broken by
   the number of pulls, then by the *latest* step (so the player has walked away from the box
   it last pulled), is returned.

Everything is drawn from ``random.Random(seed)``; a degenerate attempt (no box ever left its
target) is retried with ``random.Random(f"{seed}/{attempt}")``. ``seed`` may be an int or a str.

With the defaults (6x6, one box, 30 steps) the shortest solutions of seeds 0..999 are 1 to 10
moves long (mean 3.7); 7x7 with two boxes gives 1 to 14 (mean 4.7).
"""

from __future__ import annotations

import random

from arl.envs.sokoban.level import DIRECTIONS, Level, Pos

__all__ = ["Level", "generate_level"]

_STEPS = tuple(DIRECTIONS.values())


def _connected(floor: set[Pos]) -> bool:
    start = next(iter(floor))
    seen = {start}
    stack = [start]
    while stack:
        r, c = stack.pop()
        for dr, dc in _STEPS:
            q = (r + dr, c + dc)
            if q in floor and q not in seen:
                seen.add(q)
                stack.append(q)
    return len(seen) == len(floor)


def _room(rng: random.Random, rows: int, cols: int, internal_walls: int, min_floor: int):
    """Border walls plus up to ``internal_walls`` inner walls that keep the floor connected."""
    walls = {
        (r, c) for r in range(rows) for c in range(cols) if r in (0, rows - 1) or c in (0, cols - 1)
    }
    floor = {(r, c) for r in range(1, rows - 1) for c in range(1, cols - 1)}
    candidates = sorted(floor)
    rng.shuffle(candidates)
    placed = 0
    for cell in candidates:
        if placed == internal_walls or len(floor) <= min_floor:
            break
        floor.discard(cell)
        if _connected(floor):
            walls.add(cell)
            placed += 1
        else:
            floor.add(cell)
    return walls, floor


def _attempt(
    rng: random.Random,
    dim_room: tuple[int, int],
    num_boxes: int,
    search_depth: int,
    internal_walls: int,
    pull_probability: float,
) -> Level | None:
    rows, cols = dim_room
    walls, floor = _room(rng, rows, cols, internal_walls, min_floor=num_boxes + 2)
    floor_cells = sorted(floor)
    targets = rng.sample(floor_cells, num_boxes)
    boxes = list(targets)  # boxes[i] started on targets[i]
    player = rng.choice([c for c in floor_cells if c not in targets])

    best, best_score = None, None
    pulls = 0
    for _ in range(search_depth):
        dr, dc = rng.choice(_STEPS)
        nxt = (player[0] + dr, player[1] + dc)
        if nxt not in floor or nxt in boxes:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in boxes and rng.random() < pull_probability:
            boxes[boxes.index(behind)] = player
            pulls += 1
        player = nxt
        if all(b in targets for b in boxes):
            continue
        displacement = sum(
            abs(b[0] - t[0]) + abs(b[1] - t[1]) for b, t in zip(boxes, targets, strict=True)
        )
        score = (displacement, pulls)
        if best_score is None or score >= best_score:  # ties: the latest state
            best_score, best = score, (frozenset(boxes), player)
    if best is None:
        return None
    return Level(
        dims=(rows, cols),
        walls=frozenset(walls),
        targets=frozenset(targets),
        boxes=best[0],
        player=best[1],
    )


def generate_level(
    seed: int | str,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    search_depth: int = 30,
    internal_walls: int = 0,
    pull_probability: float = 0.8,
    max_attempts: int = 100,
) -> Level:
    """A solvable level, deterministic in ``seed`` and the settings.

    Args:
        seed: the level's seed.
        dim_room: (rows, cols) including the wall border; at least 3x3.
        num_boxes: boxes (= targets).
        search_depth: steps of the reverse walk.
        internal_walls: wall cells added inside the room (fewer if the room is too small).
        pull_probability: chance that a reverse step pulls the box behind the player.
        max_attempts: derived seeds tried before giving up.
    """
    rows, cols = (int(x) for x in dim_room)
    interior = (rows - 2) * (cols - 2)
    if rows < 3 or cols < 3 or num_boxes < 1 or interior < num_boxes + 2:
        raise ValueError(f"cannot place {num_boxes} boxes and a player in a {rows}x{cols} room")
    for attempt in range(max_attempts):
        rng = random.Random(seed) if attempt == 0 else random.Random(f"{seed}/{attempt}")
        level = _attempt(
            rng, (rows, cols), num_boxes, search_depth, internal_walls, pull_probability
        )
        if level is not None:
            return level
    raise RuntimeError(f"no non-trivial level after {max_attempts} attempts (seed {seed})")
