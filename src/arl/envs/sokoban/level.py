"""A Sokoban level: the immutable state of one board, its text forms and its move rule.

Positions are ``(row, col)`` tuples, row 0 at the top. Cells outside ``dims`` count as walls, so a
level whose text is not enclosed by walls is still well defined.

Two text forms exist:

* the Boxoban / classic form used by files and :meth:`Level.to_text`:
  ``#`` wall, space floor, ``.`` target, ``$`` box, ``*`` box on target, ``@`` player,
  ``+`` player on target;
* the form shown to the model (:func:`render_grid`, as in RAGEN): ``#`` wall, ``_`` floor,
  ``O`` target, ``X`` box, ``√`` box on target, ``P`` player, ``S`` player on target.

:meth:`Level.from_text` reads both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

Pos = tuple[int, int]

ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")
DIRECTIONS: dict[str, Pos] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

# (wall, target, box, player) -> symbol, for both text forms
_CLASSIC = {
    "wall": "#",
    "floor": " ",
    "target": ".",
    "box": "$",
    "box_target": "*",
    "player": "@",
    "player_target": "+",
}
_RENDER = {
    "wall": "#",
    "floor": "_",
    "target": "O",
    "box": "X",
    "box_target": "√",
    "player": "P",
    "player_target": "S",
}
_SYMBOL_TO_KIND = {sym: kind for table in (_CLASSIC, _RENDER) for kind, sym in table.items()}

LEGEND = "# wall, _ floor, O target, X box, √ box on target, P you, S you on target"


@dataclass(frozen=True)
class Level:
    """One Sokoban board: static walls and targets, and the dynamic boxes and player.

    Attributes:
        dims: (rows, cols) of the grid.
        walls: wall cells.
        targets: target cells (as many as boxes).
        boxes: box cells.
        player: the player's cell.
        name: optional label (e.g. the Boxoban puzzle number); not part of equality.
    """

    dims: tuple[int, int]
    walls: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if len(self.boxes) != len(self.targets):
            raise ValueError(f"{len(self.boxes)} boxes but {len(self.targets)} targets")
        if not self.boxes:
            raise ValueError("a level needs at least one box")
        for cell in (self.player, *self.boxes, *self.targets):
            if not self.in_bounds(cell) or cell in self.walls:
                raise ValueError(f"cell {cell} is a wall or outside the {self.dims} grid")
        if self.player in self.boxes:
            raise ValueError("the player stands on a box")

    # --- queries ---------------------------------------------------------------------------
    def in_bounds(self, cell: Pos) -> bool:
        return 0 <= cell[0] < self.dims[0] and 0 <= cell[1] < self.dims[1]

    def is_wall(self, cell: Pos) -> bool:
        return cell in self.walls or not self.in_bounds(cell)

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)

    @property
    def boxes_on_targets(self) -> int:
        return len(self.boxes & self.targets)

    @property
    def solved(self) -> bool:
        return self.boxes == self.targets

    # --- dynamics --------------------------------------------------------------------------
    def move(self, action: str) -> Level:
        """The level after the player tries to move ``action``; ``self`` when the move is blocked.

        The player steps onto a free cell, or pushes a box one cell when the cell behind the box is
        free (not a wall, not another box).
        """
        dr, dc = DIRECTIONS[action]
        nxt = (self.player[0] + dr, self.player[1] + dc)
        if self.is_wall(nxt):
            return self
        if nxt in self.boxes:
            beyond = (nxt[0] + dr, nxt[1] + dc)
            if self.is_wall(beyond) or beyond in self.boxes:
                return self
            return replace(self, boxes=(self.boxes - {nxt}) | {beyond}, player=nxt)
        return replace(self, player=nxt)

    # --- text ------------------------------------------------------------------------------
    def _grid(self, table: dict[str, str]) -> str:
        rows = [
            list(row) for row in _background(self.dims, self.walls, self.targets, table["floor"])
        ]
        for r, c in self.boxes:
            rows[r][c] = table["box_target" if (r, c) in self.targets else "box"]
        r, c = self.player
        rows[r][c] = table["player_target" if (r, c) in self.targets else "player"]
        return "\n".join("".join(row) for row in rows)

    def to_text(self) -> str:
        """The classic / Boxoban text form (``# @ $ . * +`` and space)."""
        return self._grid(_CLASSIC)

    @classmethod
    def from_text(cls, text: str, name: str = "") -> Level:
        """Parse a grid in either the classic or the rendered symbol set.

        Short rows are padded with floor; blank leading/trailing lines are ignored.
        """
        lines = [line.rstrip("\n\r") for line in text.split("\n")]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            raise ValueError("empty level text")
        cols = max(len(line) for line in lines)
        walls, targets, boxes, players = set(), set(), set(), []
        for r, line in enumerate(lines):
            for c, sym in enumerate(line.ljust(cols)):
                kind = _SYMBOL_TO_KIND.get(sym)
                if kind is None:
                    raise ValueError(f"unknown symbol {sym!r} at row {r}, col {c}")
                if kind == "wall":
                    walls.add((r, c))
                if kind in ("target", "box_target", "player_target"):
                    targets.add((r, c))
                if kind in ("box", "box_target"):
                    boxes.add((r, c))
                if kind in ("player", "player_target"):
                    players.append((r, c))
        if len(players) != 1:
            raise ValueError(f"expected exactly one player, found {len(players)}")
        return cls(
            dims=(len(lines), cols),
            walls=frozenset(walls),
            targets=frozenset(targets),
            boxes=frozenset(boxes),
            player=players[0],
            name=name,
        )


@functools.lru_cache(maxsize=256)
def _background(
    dims: tuple[int, int], walls: frozenset[Pos], targets: frozenset[Pos], floor: str
) -> tuple[str, ...]:
    """The static rows (walls, targets, floor) of a grid; cached, since they never change."""
    table = _CLASSIC if floor == _CLASSIC["floor"] else _RENDER
    return tuple(
        "".join(
            table["wall"]
            if (r, c) in walls
            else table["target"]
            if (r, c) in targets
            else table["floor"]
            for c in range(dims[1])
        )
        for r in range(dims[0])
    )


def render_grid(state: Level) -> str:
    """The grid shown to the model (RAGEN symbols), rows joined by newlines."""
    return state._grid(_RENDER)
