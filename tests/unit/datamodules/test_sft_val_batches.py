"""BC's held-out batches: each rank's contiguous share, cut by rows and padded tokens."""

from hypothesis import given, settings
from hypothesis import strategies as st

from arl.datamodules.sft_datamodule import val_batches


def test_batches_by_hand():
    lengths = [5, 5, 9, 2, 2]
    # one process, 12 tokens: [5, 5] pads to 10; adding 9 would pad 3 x 9 = 27; 9 alone; [2, 2]
    assert val_batches(lengths, 0, 1, max_rows=4, token_budget=12) == [[(0, 1.0), (1, 1.0)], [(2, 1.0)], [(3, 1.0), (4, 1.0)]]
    # two ranks: rank 0 takes [0, 2), rank 1 takes [2, 5)
    assert val_batches(lengths, 0, 2, max_rows=4, token_budget=100) == [[(0, 1.0), (1, 1.0)]]
    assert val_batches(lengths, 1, 2, max_rows=4, token_budget=100) == [[(2, 1.0), (3, 1.0), (4, 1.0)]]
    # the row limit: two rows a batch
    assert val_batches(lengths, 0, 1, max_rows=2, token_budget=100) == [[(0, 1.0), (1, 1.0)], [(2, 1.0), (3, 1.0)], [(4, 1.0)]]
    # a row longer than the budget goes alone; more ranks than samples leaves some empty
    assert val_batches([50], 0, 1, max_rows=4, token_budget=8) == [[(0, 1.0)]]
    assert val_batches([3], 0, 2, max_rows=4, token_budget=8) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=0, max_size=30), st.integers(1, 5), st.integers(1, 6), st.integers(1, 120))
def test_the_ranks_cover_every_sample_once_within_the_limits(lengths, world, max_rows, budget):
    seen = []
    for rank in range(world):
        for batch in val_batches(lengths, rank, world, max_rows, budget):
            rows = [i for i, w in batch]
            assert all(w == 1.0 for _, w in batch) and 1 <= len(rows) <= max_rows
            assert len(rows) == 1 or len(rows) * max(lengths[i] for i in rows) <= budget
            seen += rows
    assert seen == list(range(len(lengths)))  # every sample once, in order
