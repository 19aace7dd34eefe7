"""Reverse-play generator and the solvers: every generated level is solved."""

from __future__ import annotations

from collections import deque

import pytest

from arl.envs.sokoban import Level, generate_level, solve
from arl.envs.sokoban.solver import DEFAULT_MAX_STATES, Board, replay


def _check_level(level: Level, num_boxes: int) -> None:
    rows, cols = level.dims
    assert len(level.boxes) == len(level.targets) == num_boxes
    border = {
        (r, c) for r in range(rows) for c in range(cols) if r in (0, rows - 1) or c in (0, cols - 1)
    }
    assert border <= level.walls
    assert not level.solved
    assert level.player not in level.boxes
    floor = {(r, c) for r in range(rows) for c in range(cols)} - level.walls
    # the floor is one connected region
    start = next(iter(floor))
    seen, queue = {start}, deque([start])
    while queue:
        r, c = queue.popleft()
        for q in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if q in floor and q not in seen:
                seen.add(q)
                queue.append(q)
    assert seen == floor


def test_generation_is_deterministic():
    for seed in range(20):
        assert generate_level(seed) == generate_level(seed)
        assert generate_level(seed, internal_walls=2) == generate_level(seed, internal_walls=2)
    assert generate_level("abc") == generate_level("abc")
    distinct = {generate_level(seed).to_text() for seed in range(100)}
    assert len(distinct) >= 50


def test_default_levels_all_solved():
    """1000 default levels (6x6, one box): valid, and BFS solves each; the plan replays."""
    for seed in range(1000):
        level = generate_level(seed)
        _check_level(level, 1)
        plan = solve(level)
        assert plan is not None and 1 <= len(plan), seed
        assert replay(level, plan).solved, seed


@pytest.mark.parametrize(
    "settings, num_boxes",
    [
        ({"dim_room": (7, 7), "num_boxes": 2}, 2),
        ({"internal_walls": 3}, 1),
        ({"dim_room": (7, 7), "num_boxes": 2, "internal_walls": 4, "search_depth": 50}, 2),
        ({"dim_room": (8, 8), "num_boxes": 3, "internal_walls": 4, "search_depth": 60}, 3),
    ],
)
def test_other_settings_solved(settings, num_boxes):
    for seed in range(150):
        level = generate_level(seed, **settings)
        _check_level(level, num_boxes)
        plan = solve(level)
        assert plan is not None and replay(level, plan).solved, (settings, seed)


def test_internal_walls_are_added():
    plain = generate_level(5)
    walled = generate_level(5, internal_walls=3)
    assert len(walled.walls) == len(plain.walls) + 3


def test_bad_settings_raise():
    with pytest.raises(ValueError):
        generate_level(0, dim_room=(3, 3), num_boxes=1)
    with pytest.raises(ValueError):
        generate_level(0, dim_room=(4, 4), num_boxes=3)


def test_bfs_is_optimal_and_astar_valid():
    for seed in range(100):
        level = generate_level(seed, dim_room=(7, 7), num_boxes=2)
        bfs = solve(level, method="bfs")
        astar = solve(level, method="astar")
        assert replay(level, bfs).solved and replay(level, astar).solved
        assert len(bfs) <= len(astar)


def test_hand_level_optimal_plan():
    level = Level.from_text("\n".join(["######", "#@   #", "# $  #", "#  . #", "######"]))
    plan = solve(level, method="bfs")
    # down, push right, up, right, push down (or the mirror order): 5 moves
    assert replay(level, plan).solved
    assert len(plan) == 5
    astar = solve(level, method="astar")
    assert replay(level, astar).solved and len(astar) >= 5


def test_already_solved_and_unsolvable():
    assert solve(Level.from_text("#####\n#@* #\n#####")) == []
    corner = Level.from_text("\n".join(["#####", "#$  #", "#  .#", "# @ #", "#####"]))
    assert solve(corner) is None
    assert solve(corner, method="bfs") is None
    assert solve(corner, method="astar") is None
    assert solve(Level.from_text("#####\n#@$.#\n#####")) == ["right"]
    with pytest.raises(ValueError):
        solve(generate_level(0), method="dfs")


def test_budget_exhaustion_returns_none():
    level = generate_level(1, dim_room=(8, 8), num_boxes=3, search_depth=60)
    assert solve(level, max_states=2, method="bfs") is None
    assert DEFAULT_MAX_STATES >= 10_000


def test_dead_squares_and_frozen_blocks():
    level = Level.from_text("\n".join(["######", "#    #", "# $ .#", "#  @ #", "######"]))
    board = Board(level)
    for corner in [(1, 1), (1, 4), (3, 1), (3, 4)]:
        assert board.dead[board.index(corner)]
    assert not board.dead[board.index((2, 4))]  # target
    assert not board.dead[board.index((2, 2))]
    assert not board.deadlocked(level)
    assert board.deadlocked(
        Level.from_text("\n".join(["######", "#$   #", "#   .#", "#  @ #", "######"]))
    )
    # a 2x2 block of boxes in open floor, three off target: frozen, though no square is dead
    frozen = Level.from_text(
        "\n".join(
            ["########", "#      #", "# $$   #", "# $*   #", "#    ..#", "#@    .#", "########"]
        )
    )
    board = Board(frozen)
    assert not any(board.dead[board.index(b)] for b in frozen.boxes)
    assert board.deadlocked(frozen)
    assert solve(frozen) is None
