"""The behaviour-cloning dataset file and the self-bootstrapping filter, on real expert episodes."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.agent.loop import AgentLoop, LoopOptions
from arl.agent.records import Episode, Turn
from arl.bc import (
    BCEpisode,
    bc_seeds,
    collect_expert,
    dagger,
    keep_episode,
    load_episodes,
    read_header,
    relabel,
    save_episodes,
)
from arl.datamodules.rollout_datamodule import TRAIN_SEED_SPACE, VAL_SEED_BASE
from arl.rollout.hf_engine import HFEngine


@pytest.fixture(scope="module")
def expert_items(tiny):
    model, tok = tiny
    loop = AgentLoop(HFEngine(model, tok), tok, "sokoban", {"prompt_style": "compact"},
                     LoopOptions(history_window=1, max_turns=10))
    items, stats = collect_expert(loop, bc_seeds(0, 12))
    loop.close()
    return items, stats


def _turn(valid=True, reward=0.0, truncated=False, ids=(5, 6)):
    return Turn([1, 2, 3], list(ids), [-0.5] * len(ids), "t", "up" if valid else "", valid, "" if valid else "no tag",
                reward, False, 7, truncated)


def test_expert_episodes_round_trip_exactly(tmp_path, tiny, expert_items):
    _, tok = tiny
    items, stats = expert_items
    assert stats["bc/expert_success"] == 1.0 and len(items) == 12
    items = items[:8] + [BCEpisode(e.episode, "self") for e in items[8:]]
    path = save_episodes(tmp_path / "d.jsonl", items, tok, "turn", "sokoban")
    header = read_header(path)
    assert header["episodes"] == 12 and header["sources"] == {"expert": 8, "self": 4, "dagger": 0}
    loaded = load_episodes(path, tok, "turn", "sokoban")
    assert [i.source for i in loaded] == [i.source for i in items]
    assert [i.episode for i in loaded] == [i.episode for i in items]  # dataclass equality: every id and float
    assert not (tmp_path / "d.jsonl.tmp").exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"env_name": "webshop"}, "'sokoban' episodes, the run plays 'webshop'"),
        ({"sample_mode": "trajectory"}, "rollout.sample_mode is 'trajectory'"),
    ],
)
def test_a_dataset_that_does_not_fit_the_run_is_refused(tmp_path, tiny, expert_items, kwargs, message):
    _, tok = tiny
    path = save_episodes(tmp_path / "d.jsonl", expert_items[0], tok, "turn", "sokoban")
    with pytest.raises(ValueError, match=message):
        load_episodes(path, tok, **{"sample_mode": "turn", "env_name": "sokoban", **kwargs})


def test_another_tokenizer_truncation_and_foreign_files_are_refused(tmp_path, tiny, expert_items):
    _, tok = tiny
    path = save_episodes(tmp_path / "d.jsonl", expert_items[0], tok, "turn", "sokoban")
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join([json.dumps({**header, "tokenizer": "0" * 16})] + lines[1:]) + "\n")
    with pytest.raises(ValueError, match="another tokenizer"):
        load_episodes(other, tok, "turn", "sokoban")
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-2]) + "\n")
    with pytest.raises(ValueError, match="truncated"):
        load_episodes(cut, tok, "turn", "sokoban")
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"prompt": "hi"}\n')
    with pytest.raises(ValueError, match="not an ARL behaviour-cloning dataset"):
        load_episodes(foreign)
    with pytest.raises(FileNotFoundError, match="bc.dataset_path"):
        load_episodes(tmp_path / "missing.jsonl")


def test_keep_episode_needs_the_return_and_every_turn_valid():
    won = Episode(0, 0, 1, "sokoban", "sokoban", [_turn(reward=-0.1), _turn(reward=10.9)], won=True)
    assert keep_episode(won, 1.0)
    assert not keep_episode(won, 11.0)  # return 10.8 < 11
    assert keep_episode(won, 10.8)  # the threshold is inclusive
    invalid = Episode(0, 0, 1, "sokoban", "sokoban", [_turn(valid=False, reward=-0.1), _turn(reward=10.9)], won=True)
    assert not keep_episode(invalid, 1.0)
    cut = Episode(0, 0, 1, "sokoban", "sokoban", [_turn(reward=10.9, truncated=True)], won=True)
    assert not keep_episode(cut, 1.0)
    crashed = Episode(0, 0, 1, "sokoban", "sokoban", [_turn(reward=10.9)], won=True, env_error=True)
    assert not keep_episode(crashed, 1.0)
    assert not keep_episode(Episode(0, 0, 1, "sokoban", "sokoban", []), -5.0)


def test_relabel_puts_the_expert_answer_under_the_policy_prompt(tiny):
    """Hand-made DAgger turns: the one without a label is dropped, the policy's prompt stays, the
    expert's answer becomes the response; agreement counts valid turns with the expert's action."""
    _, tok = tiny
    answer = "<think>plan: left up</think><action>left</action>"
    turns = [
        Turn([1, 2], [7], [-0.3], "x", "left", True, "", 0.0, False, 11, expert_text=answer),  # agrees
        Turn([1, 3], [8], [-0.2], "y", "up", True, "", -0.1, False, 12, expert_text=answer),  # disagrees
        Turn([1, 4], [9], [-0.1], "z", "", False, "no tag", 0.0, False, 13, truncated=True, expert_text=answer),
        Turn([1, 5], [9], [-0.1], "w", "left", True, "", 0.0, True, 14),  # the expert failed here
    ]
    episode, agreed = relabel(Episode(2, 5, 77, "sokoban", "sokoban", turns, won=False), tok)
    assert agreed == 1 and [t.prompt_ids for t in episode.turns] == [[1, 2], [1, 3], [1, 4]]
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    for new, old in zip(episode.turns, turns):
        assert (new.response_ids, new.rollout_log_probs, new.response_text) == (ids, [0.0] * len(ids), answer)
        assert (new.action, new.valid, new.reason, new.truncated) == ("left", True, "", False)
        assert (new.reward, new.done, new.anchor_key) == (old.reward, old.done, old.anchor_key)
    assert (episode.group_id, episode.seed, episode.won) == (2, 77, False) and len(turns) == 4  # the input is kept


def test_dagger_refuses_trajectory_samples(tiny):
    from arl.rollout.engine import SamplingParams

    model, tok = tiny
    loop = AgentLoop(HFEngine(model, tok), tok, "sokoban", {"prompt_style": "compact"},
                     LoopOptions(sample_mode="trajectory"))
    assert loop.sample_mode == "trajectory"
    with pytest.raises(ValueError, match="DAgger needs turn samples"):
        dagger(loop, [1, 2], SamplingParams())
    loop.close()


def test_bc_seeds_are_training_seeds_and_streams_differ():
    expert, boot, dagger = bc_seeds(3, 500), bc_seeds(3, 500, stream=1), bc_seeds(3, 500, stream=2)
    assert expert == bc_seeds(3, 500) and expert != bc_seeds(4, 500)
    assert all(0 <= s < TRAIN_SEED_SPACE <= VAL_SEED_BASE for s in expert + boot + dagger)
    assert len(set(expert) & set(boot)) == len(set(expert) & set(dagger)) == len(set(boot) & set(dagger)) == 0


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 50_000), min_size=1, max_size=6),
            st.floats(-100, 100, allow_nan=False),
            st.booleans(),
            st.integers(-(2**63), 2**63 - 1),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["expert", "self", "dagger"]),
    st.one_of(st.none(), st.text(max_size=12)),
)
def test_any_episode_round_trips(tmp_path_factory, turns, source, expert_text):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a")))
    ep = Episode(3, 4, 99, "math_tool", "fractions", won=True, score=0.5)
    for ids, reward, valid, anchor in turns:
        ep.turns.append(Turn([9, 8], ids, [float(-i) / 7 for i in ids], "ü<think>", "a", valid, "", reward, False, anchor,
                             expert_text=expert_text))
    path = save_episodes(tmp_path_factory.mktemp("d") / "d.jsonl", [BCEpisode(ep, source)], tok, "trajectory", "math_tool")
    (back,) = load_episodes(path, tok, "trajectory", "math_tool")
    assert back.episode == ep and back.source == source
