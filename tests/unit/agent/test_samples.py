"""Episodes -> samples -> tensors, by hand; micro-batching by token budget."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.agent.records import Episode, Turn, anchor_key
from arl.agent.samples import collate, turn_samples
from arl.datamodules.batches import index_batch, micro_batches


def _turn(prompt, response, reward, valid=True, anchor="s"):
    return Turn(prompt, response, [-0.5] * len(response), "", "up" if valid else "", valid, "", reward, False, anchor_key(anchor))


def test_collate_by_hand():
    ep = Episode(group_id=3, episode_id=7, seed=1, env_name="sokoban", task_type="sokoban")
    ep.turns = [_turn([1, 2, 3], [4, 5], -0.1), _turn([1, 2], [6], 10.0, valid=False)]
    failed = Episode(group_id=3, episode_id=8, seed=1, env_name="sokoban", task_type="sokoban", env_error=True)
    failed.turns = [_turn([1], [2], 0.0)]
    samples = turn_samples([ep, failed])
    assert len(samples) == 2  # the env_error episode is excluded from the update
    b = collate(samples, pad_id=0)
    assert b["input_ids"].tolist() == [[1, 2, 3, 4, 5], [1, 2, 6, 0, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert b["response_mask"].tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 2, 2]]
    assert b["rollout_log_probs"].tolist() == [[0, 0, 0, -0.5, -0.5], [0, 0, -0.5, 0, 0]]
    assert b["turn"].tolist() == [0, 1] and b["group_id"].tolist() == [3, 3]
    assert b["valid"].tolist() == [True, False]
    assert torch.allclose(b["episode_return"], torch.tensor([9.9, 9.9]))
    assert b["anchor_key"][0] == b["anchor_key"][1] == anchor_key("s")


def test_anchor_key_is_stable_and_signed_64_bit():
    assert anchor_key("#_P#") == anchor_key("#_P#") != anchor_key("#P_#")
    assert -(2**63) <= anchor_key("x") < 2**63


def test_index_batch_trims_padding():
    b = collate(turn_samples([_ep([[1, 2, 3, 4, 5, 6]], [[7]]), _ep([[1]], [[2]])]), 0)
    small = index_batch(b, torch.tensor([1]))
    assert small["input_ids"].shape == (1, 2)


def _ep(prompts, responses):
    ep = Episode(0, 0, 0, "sokoban", "sokoban")
    ep.turns = [_turn(p, r, 0.0) for p, r in zip(prompts, responses)]
    return ep


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=20), st.integers(8, 120), st.booleans())
def test_micro_batches_cover_every_row_once_within_budget(lengths, budget, sort):
    b = collate(turn_samples([_ep([[1] * (n - 1) for n in lengths], [[2]] * len(lengths))]), 0)
    idx = torch.randperm(len(lengths))
    seen = []
    for mb in micro_batches({**b, "_row": torch.arange(len(lengths))}, idx, budget, sort_by_length=sort):
        rows = mb["_row"].tolist()
        seen.extend(rows)
        width = mb["input_ids"].shape[1]
        assert width == max(lengths[r] for r in rows)
        assert len(rows) == 1 or width * len(rows) <= budget
    if sort:  # shortest first, ties in the given order
        assert seen == sorted(idx.tolist(), key=lambda r: (lengths[r], idx.tolist().index(r)))
    else:
        assert seen == idx.tolist()


def test_sorted_micro_batches_pad_less():
    """Rows of similar length share a micro-batch: 4 short and 4 long rows in alternating order
    pad to the long width in every micro-batch unsorted, and only half of them sorted."""
    lengths = [4, 20, 4, 20, 4, 20, 4, 20]
    b = collate(turn_samples([_ep([[1] * (n - 1) for n in lengths], [[2]] * len(lengths))]), 0)
    idx = torch.arange(len(lengths))
    area = {s: sum(mb["input_ids"].numel() for mb in micro_batches(b, idx, 40, sort_by_length=s)) for s in (True, False)}
    assert area == {True: 4 * 4 + 4 * 20, False: 8 * 20}
