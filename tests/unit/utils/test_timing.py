"""Timing of named phases (arl.utils.timing)."""

from __future__ import annotations

import time

import pytest

from arl.utils.timing import timed


def test_records_a_positive_duration():
    times: dict[str, float] = {}
    with timed(times, "phase"):
        time.sleep(0.01)
    assert list(times) == ["phase"]
    assert 0.01 <= times["phase"] < 5.0


def test_nests_and_the_outer_includes_the_inner():
    times: dict[str, float] = {}
    with timed(times, "outer"):
        with timed(times, "inner"):
            time.sleep(0.01)
        time.sleep(0.01)
    assert times["inner"] >= 0.01
    assert times["outer"] >= times["inner"] + 0.01


def test_records_when_the_block_raises_or_returns():
    times: dict[str, float] = {}
    with pytest.raises(RuntimeError), timed(times, "failed"):
        raise RuntimeError("boom")

    def early() -> int:
        with timed(times, "returned"):
            return 1

    assert early() == 1
    assert times["failed"] >= 0.0 and times["returned"] >= 0.0
