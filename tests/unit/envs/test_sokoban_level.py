"""Level text forms, rendering, the legend and the move rule."""

from __future__ import annotations

import pytest

from arl.envs.sokoban import SYSTEM_RULES, Level, generate_level, render_grid


def test_classic_symbols_round_trip():
    text = "\n".join(["######", "#+$  #", "# *$.#", "######"])
    level = Level.from_text(text)
    assert level.player == (1, 1)
    assert level.boxes == {(1, 2), (2, 2), (2, 3)}
    assert level.targets == {(1, 1), (2, 2), (2, 4)}
    assert level.boxes_on_targets == 1
    assert level.to_text() == text
    assert Level.from_text(level.to_text()) == level


def test_render_symbols():
    level = Level.from_text("\n".join(["######", "#@$. #", "#*  .#", "##$ ##", "######"]))
    assert render_grid(level) == "\n".join(["######", "#PXO_#", "#√__O#", "##X_##", "######"])
    player_on_target = Level.from_text("######\n#+*$ #\n######")
    assert render_grid(player_on_target) == "######\n#S√X_#\n######"


def test_rendered_grid_parses_back():
    level = Level.from_text("\n".join(["######", "#@$. #", "#*  .#", "##$ ##", "######"]))
    assert Level.from_text(render_grid(level)) == level


def test_generated_levels_round_trip():
    for seed in range(50):
        level = generate_level(seed, dim_room=(7, 7), num_boxes=2, internal_walls=3)
        assert Level.from_text(level.to_text()) == level
        assert Level.from_text(render_grid(level)) == level


def test_legend_in_rules():
    for symbol, meaning in [
        ("#", "wall"),
        ("_", "floor"),
        ("O", "target"),
        ("X", "box"),
        ("√", "box on target"),
        ("P", "you"),
        ("S", "you on target"),
    ]:
        assert f"{symbol} {meaning}" in SYSTEM_RULES


@pytest.mark.parametrize(
    "text",
    [
        "#####\n#@$ #\n#####",  # a box without a target
        "#####\n# $.#\n#####",  # no player
        "######\n#@@$.#\n######",  # two players
        "######\n#@$.?#\n######",  # unknown symbol
        "",
    ],
)
def test_invalid_texts_raise(text):
    with pytest.raises(ValueError):
        Level.from_text(text)


def test_move_rule():
    level = Level.from_text("\n".join(["#######", "#@$$..#", "#     #", "#######"]))
    assert level.move("right") is level  # two boxes in a row do not move
    assert level.move("up") is level  # wall
    assert level.move("left") is level  # wall
    down = level.move("down")
    assert down.player == (2, 1) and down.boxes == level.boxes
    walked = down.move("right").move("right")
    assert walked.player == (2, 3)
    assert walked.move("up") is walked  # the box above has a wall behind it
    # push the second box right, onto a target
    at = Level.from_text("\n".join(["#######", "#  @$.#", "#######"]))
    after = at.move("right")
    assert after.player == (1, 4) and after.boxes == {(1, 5)} and after.solved


def test_outside_cells_are_walls():
    level = Level.from_text("@$.")  # no border at all
    assert level.move("left") is level
    assert level.move("up") is level
    assert level.move("right").solved
