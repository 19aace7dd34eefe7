"""Which token stream each recorded gateway call belongs to (``arl.agent.programs._streams``): by hand."""

from __future__ import annotations

import pytest

pytest.importorskip("uvicorn", reason="the ecosystem extra: pip install -e '.[ecosystem]'")


def _call(index: int, parent: int = -1):
    from arl.agent.gateway import Call

    return Call([{"role": "user", "content": str(index)}], [index], [index], [0.0], str(index), "stop",
                index=index, parent=parent)


def test_interleaved_conversations_come_out_stream_by_stream():
    from arl.agent.programs import _streams

    # two conversations a and b whose calls ended interleaved: a0 b0 a1 b1 a2
    calls = [_call(0), _call(1), _call(2, 0), _call(3, 1), _call(4, 2)]
    assert _streams(calls) == ([0, 2, 4, 1, 3], {0, 1})


def test_a_call_whose_parent_was_left_out_begins_a_stream():
    from arl.agent.programs import _streams

    # the call of index 1 was dropped (another agent's): index 2 continued it, so it begins a stream; 3 continues 2
    calls = [_call(0), _call(2, 1), _call(3, 2), _call(4, 0)]
    assert _streams(calls) == ([0, 3, 1, 2], {0, 1})


def test_calls_that_continue_nothing_are_a_stream_each():
    from arl.agent.programs import _streams

    assert _streams([_call(0), _call(1), _call(2)]) == ([0, 1, 2], {0, 1, 2})
