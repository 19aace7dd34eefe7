"""arl.plan.live_bytes: storage bytes counted from the tensors, by hand on small cases."""

from __future__ import annotations

import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.plan.live_bytes import LiveTensorBytes, storage_bytes

F32 = 4


def test_views_and_in_place_results_add_nothing_and_frees_are_subtracted():
    x = torch.zeros(100, 100)
    with LiveTensorBytes() as c:
        a = x * 2  # 40,000 bytes
        b = a.view(-1)  # a view: the same storage
        a.add_(1)  # in place: the same storage
        assert c.live_bytes == 100 * 100 * F32
        d = torch.exp(a)  # 40,000 more: peak 80,000
        del a, b
        e = d.sum()  # a's storage is gone by now; 4 bytes
        assert c.live_bytes == (100 * 100 + 1) * F32
    assert c.peak_bytes == 2 * 100 * 100 * F32
    del d, e


def test_backward_and_its_gradient_are_counted():
    x = torch.zeros(50, 20, requires_grad=True)
    with LiveTensorBytes() as c:
        y = torch.exp(x)  # kept for backward: 4,000 bytes
        loss = y.sum()  # 4 bytes
        loss.backward()  # x.grad (4,000) = the incoming gradient (4,000) x y
    assert x.grad is not None
    assert c.live_bytes >= 2 * 50 * 20 * F32  # y and x.grad are still referenced
    assert c.peak_bytes >= c.live_bytes


def test_reset_peak_starts_from_what_is_alive():
    with LiveTensorBytes() as c:
        a = torch.ones(256)
        b = torch.ones(256)
        del b
        c.reset_peak()
        assert c.peak_bytes == c.live_bytes == 256 * F32
    del a


def test_storage_bytes_counts_a_shared_storage_once():
    w = torch.zeros(8, 8)
    assert storage_bytes([w, w.t(), w[0]]) == 64 * F32
    assert storage_bytes([w, torch.zeros(3, dtype=torch.float64)]) == 64 * F32 + 24


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=8))
def test_the_peak_of_a_chain_is_the_largest_adjacent_pair(sizes):
    """y_i = zeros(n_i) + sum(y_{i-1}), y_{i-1} freed after: at each step's add, the old y, the zeros, the
    one-element sum and the new y are alive, never more."""
    with LiveTensorBytes() as c:
        y = torch.zeros(sizes[0])
        for n in sizes[1:]:
            y = torch.zeros(n) + y.sum()
    pairs = [sizes[0]] + [a + 2 * b + 1 for a, b in itertools.pairwise(sizes)]
    assert c.peak_bytes == max(pairs) * F32
