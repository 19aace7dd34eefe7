"""Math data in the verl / verl-agent format (``prompt`` = chat messages, ``reward_model`` =
{ground_truth, style}, ``data_source``, ``ability``, ``extra_info``) plays with only ``data_path``:
parquet and jsonl files made here, the real env and the real answer check."""

from __future__ import annotations

import json

import pytest

from arl.agent.prompts import build_messages, encode_prompt
from arl.envs.math_tool.data import load_records
from arl.envs.math_tool.env import MathToolEnv

SYSTEM = "You are a careful competition mathematician."
ROWS = [  # AIME-style integer, a MATH \boxed{} fraction, a LaTeX expression; one with a system message
    {"data_source": "aime", "prompt": [{"role": "system", "content": SYSTEM},
                                       {"role": "user", "content": "Find the remainder when 2^10 is divided by 1000."}],
     "ability": "math", "reward_model": {"ground_truth": "24", "style": "rule"}, "extra_info": {"index": 0, "split": "test"}},
    {"data_source": "math", "prompt": [{"role": "user", "content": "Compute 1/2 + 1/3."}],
     "ability": "math", "reward_model": {"ground_truth": "\\frac{5}{6}", "style": "rule"}, "extra_info": {"index": 1, "split": "test"}},
    {"data_source": "math", "prompt": [{"role": "user", "content": "Simplify sqrt(8)."}],
     "ability": "math", "reward_model": {"ground_truth": "2\\sqrt{2}", "style": "rule"}, "extra_info": {"index": 2, "split": "test"}},
]
RIGHT = ["\\boxed{24}", "\\boxed{\\dfrac{5}{6}}", "\\boxed{2\\sqrt 2}"]
WRONG = ["\\boxed{1024}", "\\boxed{\\frac{2}{5}}", "\\boxed{\\sqrt{2}}"]


def _parquet(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(ROWS), path)
    return path


def _jsonl(path, rows=ROWS):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(params=["parquet", "jsonl"])
def verl_file(request, tmp_path):
    return _parquet(tmp_path / "aime.parquet") if request.param == "parquet" else _jsonl(tmp_path / "aime.jsonl")


def test_records_take_the_last_user_message_the_system_message_and_the_ground_truth(verl_file):
    records = load_records(verl_file)
    assert [r.question for r in records] == [row["prompt"][-1]["content"] for row in ROWS]
    assert [r.answer for r in records] == ["24", "\\frac{5}{6}", "2\\sqrt{2}"]
    assert [r.system for r in records] == [SYSTEM, "", ""]
    assert [r.data_source for r in records] == ["aime", "math", "math"]
    assert records[0].extra_info == {"index": 0, "split": "test"}


def test_the_env_plays_it_with_only_data_path_and_the_right_answer_wins(verl_file):
    env = MathToolEnv(data_path=str(verl_file), split="all")
    for seed, (row, right, wrong) in enumerate(zip(ROWS, RIGHT, WRONG)):
        _, info = env.reset(seed)
        assert info["task"] == row["prompt"][-1]["content"] and info["data_source"] == row["data_source"]
        assert info["extra_info"] == row["extra_info"]
        assert env.step(f"so the answer is {right}").reward == 1.0, right
        env.reset(seed)
        assert env.step(f"so the answer is {wrong}").reward == 0.0, wrong


def test_the_system_message_is_the_prompts_system_message(verl_file, tiny):
    _, tok = tiny
    env = MathToolEnv(data_path=str(verl_file), split="all")
    obs, info = env.reset(0)
    messages = build_messages(env.spec, obs, "", info)
    assert messages[0] == {"role": "system", "content": SYSTEM} and messages[1]["role"] == "user"
    assert ROWS[0]["prompt"][-1]["content"] in messages[1]["content"]
    text = tok.decode(encode_prompt(tok, messages))
    assert text.index(SYSTEM) < text.index("Find the remainder")
    obs, info = env.reset(1)  # no system message: the user message alone
    assert [m["role"] for m in build_messages(env.spec, obs, "", info)] == ["user"]


def test_an_unknown_format_lists_its_columns_and_the_keys_to_set(tmp_path):
    path = _jsonl(tmp_path / "odd.jsonl", [{"query": "1+1?", "target": "2"}])
    with pytest.raises(ValueError, match=r"\['query', 'target'\] match no known math data format.*question_key.*answer_key"):
        load_records(path)
    records = load_records(path, "query", "target")  # the keys the message names
    assert (records[0].question, records[0].answer) == ("1+1?", "2")


def test_explicit_keys_still_read_chat_and_reward_model_cells(tmp_path):
    rows = [{"messages": r["prompt"], "rm": r["reward_model"]} for r in ROWS]
    records = load_records(_jsonl(tmp_path / "renamed.jsonl", rows), "messages", "rm")
    assert records[1].question == "Compute 1/2 + 1/3." and records[1].answer == "\\frac{5}{6}"
    assert records[0].system == SYSTEM
