"""Sokoban solvers: move-optimal BFS for small rooms, push-level weighted A* for Boxoban.

``solve(level)`` returns the list of moves ("up", "down", "left", "right") that solves ``level``,
``[]`` when it is already solved, or ``None`` when the search gives up (unsolvable, or the
``max_states`` budget is spent).

Both searches run on flat cell indices of a grid padded by one ring of walls, so neighbours never
leave the array. Two deadlock rules prune states (both are exact: they never cut a solution):

* dead squares: cells from which a lone box can never reach any target (found by "pulling" boxes
  backwards from the targets, ignoring the other boxes);
* frozen squares: a 2x2 block made only of walls and boxes, one of the boxes off target.

``method="bfs"``: breadth-first over (player cell, boxes); the plan has the fewest moves.
``method="astar"``: best-first over pushes with the player normalised to the smallest cell of its
reachable region; f = pushes + ``weight`` * (sum over boxes of the push distance to the nearest
target). With ``weight > 1`` the plan is not optimal, but the search is much faster. The walks
between pushes are shortest paths.
``method="auto"``: BFS when the room's state space is small (<= ``BFS_STATE_LIMIT``), else A*.

Budget: ``max_states`` counts distinct states (BFS: discovered; A*: expanded). The default,
``DEFAULT_MAX_STATES`` = 100_000, is the per-level budget used by the tests. With it (and
``weight=3``) A* solves all 1000 levels of Boxoban medium/valid/000.txt, about 20 ms per level on
average (max about 0.6 s) on one CPU core.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Literal

from arl.envs.sokoban.level import ACTIONS, Level, Pos

DEFAULT_MAX_STATES = 100_000
BFS_STATE_LIMIT = 200_000  # auto: BFS when floor * C(floor - 1, boxes) is at most this
INF = 1 << 30


class Board:
    """The static part of a level (walls, targets) as flat-index tables, plus deadlock rules."""

    def __init__(self, level: Level):
        rows, cols = level.dims
        self.width = cols + 2
        self.size = (rows + 2) * self.width
        self.wall = [True] * self.size
        for r in range(rows):
            for c in range(cols):
                if (r, c) not in level.walls:
                    self.wall[self.index((r, c))] = False
        w = self.width
        # (offset, action name), in ACTIONS order
        self.moves: tuple[tuple[int, str], ...] = tuple(zip((-w, w, -1, 1), ACTIONS, strict=True))
        self.targets = frozenset(self.index(t) for t in level.targets)
        self.target_dist = self._pull_distances()
        self.dead = [not self.wall[i] and self.target_dist[i] >= INF for i in range(self.size)]
        self.num_floor = self.wall.count(False)

    def index(self, pos: Pos) -> int:
        return (pos[0] + 1) * self.width + pos[1] + 1

    def _pull_distances(self) -> list[int]:
        """Fewest pushes that bring a lone box from each cell to its nearest target."""
        dist = [INF] * self.size
        queue = deque()
        for t in self.targets:
            dist[t] = 0
            queue.append(t)
        while queue:
            y = queue.popleft()
            for d, _ in self.moves:
                x = y - d  # the box came from x, pushed by a player standing at x - d
                if not self.wall[x] and not self.wall[x - d] and dist[x] >= INF:
                    dist[x] = dist[y] + 1
                    queue.append(x)
        return dist

    def frozen(self, cell: int, boxes: frozenset[int]) -> bool:
        """True when ``cell`` (a box) closes a 2x2 block of walls/boxes with a box off target."""
        w, wall = self.width, self.wall
        for top_left in (cell, cell - 1, cell - w, cell - w - 1):
            block = (top_left, top_left + 1, top_left + w, top_left + w + 1)
            if all(wall[c] or c in boxes for c in block) and any(
                c in boxes and c not in self.targets for c in block
            ):
                return True
        return False

    def deadlocked(self, level: Level) -> bool:
        """Whether ``level`` (same walls and targets) can no longer be solved, by the two rules."""
        boxes = frozenset(self.index(b) for b in level.boxes)
        return any(self.dead[b] or self.frozen(b, boxes) for b in boxes)

    def reach(self, start: int, boxes: frozenset[int]) -> set[int]:
        """Cells the player can walk to from ``start`` without pushing."""
        wall = self.wall
        seen = {start}
        stack = [start]
        while stack:
            p = stack.pop()
            for d, _ in self.moves:
                q = p + d
                if q not in seen and not wall[q] and q not in boxes:
                    seen.add(q)
                    stack.append(q)
        return seen

    def walk(self, start: int, goal: int, boxes: frozenset[int]) -> list[str]:
        """A shortest walk (no pushes) from ``start`` to ``goal``; the goal must be reachable."""
        parent: dict[int, tuple[int, str] | None] = {start: None}
        queue = deque([start])
        while queue:
            p = queue.popleft()
            if p == goal:
                break
            for d, name in self.moves:
                q = p + d
                if q not in parent and not self.wall[q] and q not in boxes:
                    parent[q] = (p, name)
                    queue.append(q)
        if goal not in parent:
            raise RuntimeError("walk target unreachable (solver bug)")
        path = []
        node = goal
        while parent[node] is not None:
            node, name = parent[node]
            path.append(name)
        return path[::-1]


def _bfs(board: Board, player: int, boxes: frozenset[int], max_states: int) -> list[str] | None:
    """Move-level breadth-first search: the plan with the fewest moves."""
    start = (player, boxes)
    parent: dict[tuple[int, frozenset[int]], tuple | None] = {start: None}
    queue = deque([start])
    wall, dead, targets = board.wall, board.dead, board.targets
    while queue:
        state = queue.popleft()
        p, bx = state
        for d, name in board.moves:
            q = p + d
            if wall[q]:
                continue
            nbx = bx
            if q in bx:
                beyond = q + d
                if wall[beyond] or beyond in bx or dead[beyond]:
                    continue
                nbx = (bx - {q}) | {beyond}
                if board.frozen(beyond, nbx):
                    continue
            child = (q, nbx)
            if child in parent:
                continue
            parent[child] = (state, name)
            if nbx == targets:
                plan = []
                node = child
                while parent[node] is not None:
                    node, move = parent[node]
                    plan.append(move)
                return plan[::-1]
            if len(parent) >= max_states:
                return None
            queue.append(child)
    return None


def _astar(
    board: Board, player: int, boxes: frozenset[int], max_states: int, weight: float
) -> list[str] | None:
    """Push-level weighted A*; returns the moves (walks + pushes)."""
    wall, dead, dist, targets = board.wall, board.dead, board.target_dist, board.targets
    tie = itertools.count()
    h0 = sum(dist[b] for b in boxes)
    # heap entry: (f, h, tiebreak, g, player, boxes, pushes); pushes is a linked list
    # (previous, box cell, offset) of the pushes made so far, None at the start
    heap = [(weight * h0, h0, next(tie), 0, player, boxes, None)]
    closed: set[tuple[int, frozenset[int]]] = set()
    while heap:
        _, h, _, g, p, bx, pushes = heapq.heappop(heap)
        region = board.reach(p, bx)
        key = (min(region), bx)
        if key in closed:
            continue
        closed.add(key)
        if len(closed) > max_states:
            return None
        for b in bx:
            for d, _ in board.moves:
                beyond = b + d
                if b - d not in region or wall[beyond] or beyond in bx or dead[beyond]:
                    continue
                nbx = (bx - {b}) | {beyond}
                step = (pushes, b, d)
                if nbx == targets:
                    return _moves_from_pushes(board, player, boxes, step)
                if board.frozen(beyond, nbx):
                    continue
                nh = h - dist[b] + dist[beyond]
                heapq.heappush(heap, (g + 1 + weight * nh, nh, next(tie), g + 1, b, nbx, step))
    return None


def _moves_from_pushes(board: Board, player: int, boxes: frozenset[int], last_push) -> list[str]:
    pushes = []
    node = last_push
    while node is not None:
        node, b, d = node
        pushes.append((b, d))
    pushes.reverse()
    names = dict(board.moves)
    moves: list[str] = []
    for b, d in pushes:
        moves += board.walk(player, b - d, boxes)
        moves.append(names[d])
        boxes = (boxes - {b}) | {b + d}
        player = b
    return moves


def solve(
    level: Level,
    max_states: int = DEFAULT_MAX_STATES,
    method: Literal["auto", "bfs", "astar"] = "auto",
    weight: float = 3.0,
) -> list[str] | None:
    """A plan (list of moves) that solves ``level``; ``None`` if none is found within budget."""
    if level.solved:
        return []
    board = Board(level)
    player = board.index(level.player)
    boxes = frozenset(board.index(b) for b in level.boxes)
    if any(board.dead[b] or board.frozen(b, boxes) for b in boxes):
        return None
    if method == "auto":
        floor = board.num_floor
        estimate = floor * math.comb(max(floor - 1, 0), len(boxes))
        method = "bfs" if estimate <= BFS_STATE_LIMIT else "astar"
    if method == "bfs":
        return _bfs(board, player, boxes, max_states)
    if method == "astar":
        return _astar(board, player, boxes, max_states, weight)
    raise ValueError(f"unknown method {method!r}; valid: auto, bfs, astar")


def replay(level: Level, plan: list[str]) -> Level:
    """The level after playing ``plan`` from ``level``."""
    for action in plan:
        level = level.move(action)
    return level
