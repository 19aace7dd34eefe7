"""The strict <think>/<action> parser: every rule of the format, by hand."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arl.agent.parsing import REJECTED_BY_ENV, env_verdict, parse_response

MOVES = ["up", "down", "left", "right"]


@pytest.mark.parametrize(
    "text, valid, action, reason",
    [
        ("<think>box is left</think><action>left</action>", True, "left", ""),
        ("  <think>x</think>\n<action> Up </action>\n", True, "up", ""),
        ("<think></think><action>down</action>", True, "down", ""),
        ("", False, "", "empty"),
        ("   \n", False, "", "empty"),
        ("<action>up</action>", False, "", "missing <think>"),
        ("<think>hm</think>", False, "", "missing <action>"),
        ("<think>a</think><think>b</think><action>up</action>", False, "", "repeated <think>"),
        ("<think>a</think><action>up</action><action>up</action>", False, "", "repeated <action>"),
        ("sure! <think>a</think><action>up</action>", False, "", "text outside tags"),
        ("<think>a</think>so<action>up</action>", False, "", "text outside tags"),
        ("<think>a</think><action>up</action> done", False, "", "text outside tags"),
        ("<action>up</action><think>a</think>", False, "", "wrong tag order"),
        ("<think>a</think><action>  </action>", False, "", "empty action"),
        ("<think>a</think><action>jump</action>", False, "jump", "not admissible"),
        ("<think>a<action>up</action></think>", False, "", "wrong tag order"),
    ],
)
def test_cases(text, valid, action, reason):
    p = parse_response(text, MOVES)
    assert (p.valid, p.action, p.reason) == (valid, action, reason)


def test_without_admissible_any_action_passes():
    p = parse_response("<think>t</think><action>go to desk 1</action>")
    assert p.valid and p.action == "go to desk 1" and p.think == "t"


def test_admissible_returns_canonical_spelling():
    p = parse_response("<think>t</think><action>GO   to Desk 1</action>", ["go to desk 1", "look"])
    assert p.valid and p.action == "go to desk 1"


@given(st.text(max_size=300))
def test_never_raises_and_invalid_has_reason(text):
    p = parse_response(text, MOVES)
    assert p.valid == (p.reason == "")
    if p.valid:
        assert p.action in MOVES


def test_env_verdict_makes_a_refused_valid_action_invalid():
    valid = parse_response("<think>t</think><action>go</action>")
    refused = env_verdict(valid, {"invalid_action": True})
    assert not refused.valid and refused.reason == REJECTED_BY_ENV and refused.action == "go" and refused.think == "t"
    assert env_verdict(valid, {"invalid_action": False}) == valid and env_verdict(valid, {}) == valid
    broken = parse_response("go")
    assert env_verdict(broken, {"invalid_action": True}) == broken  # already invalid: its own reason stays
