"""arl.analysis.errors and `report.py errors`: the first invalid action and what follows it, by hand,
and on episodes a real agent loop played on the real ALFWorld engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from arl.analysis.errors import errors_table, first_error, summarise

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
import report  # src/report.py


def turn(valid: bool, action: str = "", reason: str = "", response: str = "") -> dict:
    return {"valid": valid, "action": action, "reason": "" if valid else (reason or "not admissible"),
            "response": response or f"<action>{action}</action>"}


def test_first_error_by_hand() -> None:
    ok = turn(True, "go to desk 1")
    bad = turn(False, "take mug 9 from desk 1")
    assert first_error([ok, ok], won=True) is None
    loop = first_error([ok, bad, bad, bad], won=False)
    assert (loop.turn, loop.kind, loop.next_turn, loop.invalid_run, loop.recovered, loop.won) == (
        1, "not admissible: take", "same", 3, False, False)
    back = first_error([bad, ok, turn(False, "", "missing <action>", "hm")], won=True)
    assert (back.turn, back.next_turn, back.invalid_run, back.recovered, back.won) == (0, "valid", 1, True, True)
    other = first_error([turn(False, "", "missing <action>", "hm"), bad], won=False)
    assert (other.kind, other.next_turn, other.invalid_run) == ("missing <action>", "other invalid", 2)
    assert first_error([ok, bad], won=False).next_turn == "end"
    # the agent loop records no action for an invalid turn: the command comes from the response's tags
    logged = {"valid": False, "action": "", "reason": "not admissible",
              "response": "<think>the mug</think><action>take mug 9 from desk 1</action>"}
    from_response = first_error([ok, logged, dict(logged)], won=False)
    assert (from_response.kind, from_response.next_turn) == ("not admissible: take", "same")


def _write(path: Path, episodes: list[tuple[bool, list[dict]]]) -> Path:
    path.write_text("".join(json.dumps({"seed": i, "won": won, "turn_log": turns}) + "\n"
                            for i, (won, turns) in enumerate(episodes)))
    return path


def test_the_table_counts_by_hand(tmp_path) -> None:
    ok, bad = turn(True, "go to desk 1"), turn(False, "open sky 1")
    path = _write(tmp_path / "iter0.jsonl", [(True, [ok, ok]), (False, [ok, bad, bad]), (True, [bad, ok, ok])])
    summary = summarise(path)
    assert (summary.episodes, summary.won, summary.turns, len(summary.errors)) == (3, 2, 8, 2)
    table = errors_table({"start": summary})
    assert "| with an invalid turn | 0.667 (2) |" in table
    assert "| first invalid turn (mean index) | 0.5 |" in table
    assert "| first error: not admissible: open | 1.000 (2) |" in table
    assert "| next turn: same | 0.500 (1) |" in table and "| next turn: valid | 0.500 (1) |" in table
    assert "| invalid turns in a row from it (mean) | 1.5 |" in table
    assert "| won after it | 0.500 (1) |" in table


def test_a_run_folder_reads_its_last_validation_and_files_without_turns_are_refused(tmp_path) -> None:
    folder = tmp_path / "run" / "val_episodes"
    folder.mkdir(parents=True)
    _write(folder / "iter0.jsonl", [(False, [turn(False, "x")])])
    _write(folder / "iter12.jsonl", [(True, [turn(True, "go to desk 1")])])
    assert summarise(tmp_path / "run").won == 1
    (tmp_path / "bare.jsonl").write_text(json.dumps({"seed": 0, "won": False}) + "\n")
    with pytest.raises(ValueError, match="no turn_log"):
        summarise(tmp_path / "bare.jsonl")
    assert report.main(["errors", str(tmp_path / "bare.jsonl")]) == 2
    assert report.main(["errors", str(tmp_path / "nothing")]) == 2


def test_on_episodes_played_on_the_real_engine(tmp_path, capsys, tiny) -> None:
    """Episodes the untrained tiny model played on the real ALFWorld engine, written as a validation
    file writes them: its answers rarely parse, so each episode's first error is counted."""
    pytest.importorskip("alfworld")
    from arl.agent.loop import AgentLoop, LoopOptions, Task
    from arl.agent.records import episode_record
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    kwargs = {"data_source": "generated", "num_games": {"train": 4}, "prompt_style": "compact", "max_steps": 4}
    loop = AgentLoop(HFEngine(model, tok), tok, "alfworld", kwargs, LoopOptions(history_window=1, max_turns=4))
    try:
        episodes = loop.run([Task(0, 1), Task(1, 2)], group_size=2, params=SamplingParams(temperature=1.0,
                                                                                           max_new_tokens=12))
    finally:
        loop.close()
    path = tmp_path / "val.jsonl"
    path.write_text("".join(json.dumps(episode_record(e)) + "\n" for e in episodes))
    summary = summarise(path)
    invalid = [e for e in episodes if not all(t.valid for t in e.turns)]
    assert summary.episodes == 4 and len(summary.errors) == len(invalid) > 0
    assert report.main(["errors", str(path), "--name", "untrained"]) == 0
    out = capsys.readouterr().out
    assert "| | untrained |" in out and "| episodes | 4 |" in out
