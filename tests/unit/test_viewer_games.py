"""The episode viewer's game pairing (its page's JavaScript, run by node): a mix's validations pair games by
(member, seed), since two members' levels share seeds; a single env's by seed, as before."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from arl_testing import ROOT

PAGE = ROOT / "src" / "arl" / "analysis" / "viewer_page.html"


def _run(validations: list[dict], episodes: list[dict], body: str) -> list:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    page = PAGE.read_text()
    functions = page[page.index("function gameKey"):page.index("function mcnemar")]
    script = f"const V = {json.dumps(validations)}, E = {json.dumps(episodes)};\n{functions}\n" \
             f"console.log(JSON.stringify((() => {{ {body} }})()));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_mix_pairs_games_by_member_and_seed():
    validations = [{"env": "mix"}, {"env": "mix"}]
    episodes = [{"v": 0, "env": "sokoban_7x7", "seed": 5}, {"v": 0, "env": "sokoban_6x6", "seed": 5},
                {"v": 0, "env": "sokoban_6x6", "seed": 3}, {"v": 1, "env": "sokoban_7x7", "seed": 5}]
    keys, shared, ordered = _run(validations, episodes, """
        const A = byGame(0), B = byGame(1);
        return [[...A.keys()], [...A.keys()].filter((g) => B.has(g)),
                [...A.keys()].sort((x, y) => gameOrder(E[A.get(x)], E[A.get(y)]))];""")
    assert keys == ["sokoban_7x7 5", "sokoban_6x6 5", "sokoban_6x6 3"]  # seed 5 twice: two games, not one
    assert shared == ["sokoban_7x7 5"]  # the 6x6 level of seed 5 is not the 7x7 one
    assert ordered == ["sokoban_6x6 3", "sokoban_6x6 5", "sokoban_7x7 5"]


def test_one_env_pairs_games_by_seed():
    validations = [{"env": "sokoban"}, {"env": None}]
    episodes = [{"v": 0, "env": "sokoban", "seed": 11}, {"v": 0, "env": "sokoban", "seed": 2},
                {"v": 1, "seed": 11}, {"v": 1, "seed": None}]
    keys_a, keys_b = _run(validations, episodes, "return [[...byGame(0).keys()], [...byGame(1).keys()]];")
    assert keys_a == ["11", "2"] and keys_b == ["11"]  # the record's env does not enter; no seed, no game
