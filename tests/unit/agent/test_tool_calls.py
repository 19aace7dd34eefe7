"""Native tool calls by hand (arl.agent.tool_calls, the shipped templates, math_tool's native format, the
gateway's request handling): exact parses, messages, rendered prompts and answers on small cases."""

from __future__ import annotations

import json

import pytest

from arl.agent.tool_calls import (
    as_openai_message,
    normalize_message,
    normalize_tools,
    observation_messages,
    parse_tool_calls,
    read_native_answer,
    renders_tools,
)
from arl.envs.base import ToolCall, format_call_action, parse_call_action
from arl_testing import ScriptedEngine

PYTHON = {"type": "function", "function": {"name": "python", "description": "Run code",
                                           "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                                                          "required": ["code"]}}}
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}, "note": {"type": "string"}}}}}


# ---------------------------------------------------------------------------------------------- the parsers
def test_hermes_reads_calls_and_keeps_the_text_before_them():
    text = '<think>add</think>\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    parsed = parse_tool_calls(text, "hermes")
    assert parsed.content == "<think>add</think>" and parsed.error == ""
    assert parsed.calls == (ToolCall("python", {"code": "print(1)"}),)
    two = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b"}</tool_call> tail'
    assert [c.name for c in parse_tool_calls(two, "hermes").calls] == ["a", "b"]
    assert parse_tool_calls(two, "hermes").content == ""
    unclosed = 'x<tool_call>{"name": "a", "arguments": {"k": 1}}'  # cut by the stop: the last block runs to the end
    assert parse_tool_calls(unclosed, "hermes").calls == (ToolCall("a", {"k": 1}),)
    assert parse_tool_calls("no call here", "hermes") == type(parsed)("no call here")


@pytest.mark.parametrize("text, reason", [
    ('<tool_call>{"name": "python", "arguments": {"code": </tool_call>', "not JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', "without a function name"),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "not a JSON object"),
    ('<tool_call>[1, 2]</tool_call>', "without a function name"),
])
def test_a_hermes_call_that_does_not_parse_leaves_the_whole_text(text, reason):
    parsed = parse_tool_calls(text, "hermes")
    assert parsed.calls == () and parsed.content == text and reason in parsed.error


def test_qwen3_xml_types_parameters_by_the_tools_schema():
    text = ("I will add.\n<tool_call>\n<function=add>\n<parameter=a>\n3\n</parameter>\n<parameter=b>\n2.5\n"
            "</parameter>\n<parameter=note>\n07\n</parameter>\n</function>\n</tool_call>")
    parsed = parse_tool_calls(text, "qwen3_xml", [ADD])
    assert parsed.content == "I will add."
    assert parsed.calls == (ToolCall("add", {"a": 3, "b": 2.5, "note": "07"}),)
    untyped = parse_tool_calls("<tool_call><function=f><parameter=x>5</parameter></function></tool_call>", "qwen3_xml")
    assert untyped.calls == (ToolCall("f", {"x": "5"}),)
    bad = "<tool_call>no function here</tool_call>"
    assert parse_tool_calls(bad, "qwen3_xml").calls == () and "function=NAME" in parse_tool_calls(bad, "qwen3_xml").error


def test_an_unknown_parser_is_named():
    with pytest.raises(ValueError, match="unknown tool parser 'nope'; valid: hermes, qwen3_xml"):
        parse_tool_calls("x", "nope")


# ----------------------------------------------------------------------------------------- message forms
def test_request_messages_normalize_to_what_the_template_renders():
    call = {"id": "c1", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(2)"}'}}
    assert normalize_message({"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}) == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "python", "arguments": {"code": "print(2)"}}}]}
    assert normalize_message({"role": "tool", "tool_call_id": "c1", "content": "2"}) == {
        "role": "tool", "content": "2", "tool_call_id": "c1"}
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert normalize_message(parts) == {"role": "user", "content": "a\nb"}
    assert normalize_message({"role": "developer", "content": "rules"}) == {"role": "system", "content": "rules"}
    for bad, match in [({"role": "robot", "content": "x"}, "role"),
                       ({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}, "text parts"),
                       ({"role": "assistant", "content": None}, "needs a text content"),
                       ({"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}, "each tool call")]:
        with pytest.raises(ValueError, match=match):
            normalize_message(bad)
    with pytest.raises(ValueError, match="each tool is"):
        normalize_tools([{"type": "function", "function": {"description": "no name"}}])
    assert normalize_tools(None) == [] and normalize_tools([PYTHON]) == [PYTHON]


def test_an_answer_reads_into_its_message_action_and_the_observations_messages():
    text = '<think>t</think>\n<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    answer = read_native_answer(text, "hermes", [PYTHON], "3")
    assert answer.message == {"role": "assistant", "content": "<think>t</think>", "tool_calls": [
        {"id": "call_3_0", "type": "function", "function": {"name": "python", "arguments": {"code": "print(1)"}}}]}
    assert answer.action == '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    assert observation_messages(answer.message, "1") == [{"role": "tool", "tool_call_id": "call_3_0", "content": "1"}]
    assert as_openai_message(answer.message)["tool_calls"][0]["function"]["arguments"] == '{"code": "print(1)"}'
    plain = read_native_answer("\\boxed{4}", "hermes", [PYTHON], "0")
    assert plain.action == "\\boxed{4}" and observation_messages(plain.message, "ok") == [{"role": "user", "content": "ok"}]
    assert as_openai_message({"role": "assistant", "content": "", "tool_calls": answer.message["tool_calls"]})[
        "content"] is None


def test_call_actions_round_trip_and_text_is_not_a_call():
    calls = [ToolCall("python", {"code": "print('<tool_call>')"}), ToolCall("f", {})]
    action = "".join(format_call_action(c) for c in calls)
    assert parse_call_action(action) == calls and parse_call_action("  " + action + "\n") == calls
    for text in ("\\boxed{2}", "", None, "<tool_call>{bad</tool_call>", action + " and more",
                 '<tool_call>{"name": "f"}</tool_call>x<tool_call>{"name": "g"}</tool_call>'):
        assert parse_call_action(text) is None


# ----------------------------------------------------------------------------------------------- templates
def test_the_shipped_templates_render_tools_and_nothing_else_changes(tiny):
    from arl.models.templates import SMOLLM2_PLAIN_TEMPLATE, SMOLLM2_TEMPLATE, TINY_PLAIN_TEMPLATE, TINY_TEMPLATE

    _, tok = tiny
    conversations = [[{"role": "user", "content": "hi"}],
                     [{"role": "system", "content": "S"}, {"role": "user", "content": "u"},
                      {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]]
    for plain, twin in ((TINY_PLAIN_TEMPLATE, TINY_TEMPLATE), (SMOLLM2_PLAIN_TEMPLATE, SMOLLM2_TEMPLATE)):
        for messages in conversations:
            for opened in (True, False):
                plain_text, twin_text = (tok.apply_chat_template(messages, chat_template=t, tokenize=False,
                                                                 add_generation_prompt=opened) for t in (plain, twin))
                assert plain_text == twin_text
    assert tok.chat_template == TINY_TEMPLATE and renders_tools(tok)  # the fixture's folder was swapped at load
    messages = [{"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "python", "arguments": {"code": "print(5)"}}}]},
                {"role": "tool", "tool_call_id": "c", "content": "5"}, {"role": "tool", "tool_call_id": "d", "content": "6"}]
    assert tok.apply_chat_template(messages, tools=[ADD], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\n# Tools\n<tools>\n" + json.dumps(ADD) + "\n</tools>\n"
        'Call one as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n2+3?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "python", "arguments": {"code": "print(5)"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n6\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_a_stream_continued_with_tool_messages_is_the_template_rendering(tiny):
    from arl.agent.prompts import TrajectoryTemplate

    _, tok = tiny
    template = TrajectoryTemplate(tok, [PYTHON])
    template.check()
    answer = '<tool_call>\n{"name": "python", "arguments": {"code": "print(5)"}}\n</tool_call>'
    response = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]  # it stopped on <|im_end|>
    first = template.first_ids("2+3?")
    stream = first + response + template.continuation_of([{"role": "tool", "tool_call_id": "c", "content": "5"}],
                                                         response)
    messages = [{"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "python", "arguments": {"code": "print(5)"}}}]},
                {"role": "tool", "tool_call_id": "c", "content": "5"}]
    rendered = tok.apply_chat_template(messages, tools=[PYTHON], tokenize=False, add_generation_prompt=True)
    assert tok.decode(stream) == rendered


# ------------------------------------------------------------------------------------- math_tool, native
def test_math_tool_native_runs_one_python_call_and_refuses_the_rest():
    from arl.envs.math_tool.env import MSG_BAD_ARGUMENTS, MSG_NONE_NATIVE, MSG_ONE_CALL, MathToolEnv

    env = MathToolEnv(tool_format="native", max_turns=8)
    assert env.spec.tools[0]["function"]["name"] == "python"
    observation, info = env.reset(3)
    assert env.spec.render_prompt(observation, "", info).endswith("Problem: Compute (20 + 23) * 9 - 80 / 8.")
    run = env.step(format_call_action(ToolCall("python", {"code": "print(6 * 7)"})))
    assert (run.observation, run.reward, run.done, run.info.get("invalid_action")) == ("42", 0.0, False, None)
    cases = [(format_call_action(ToolCall("calc", {"code": "1"})), "Unknown tool 'calc'; the tool is python. Nothing was run."),
             (format_call_action(ToolCall("python", {"src": "1"})), MSG_BAD_ARGUMENTS),
             (format_call_action(ToolCall("python", {"code": "1"})) * 2, MSG_ONE_CALL),
             ("```python\nprint(1)\n```", MSG_NONE_NATIVE)]
    for action, observation in cases:
        refused = env.step(action)
        assert refused.observation == observation and refused.info["invalid_action"] is True and refused.reward == 0.0
    env = MathToolEnv(tool_format="native")
    env.reset(3)
    answer = env.step("<think>ok</think>\\boxed{377}")
    assert (answer.reward, answer.done, answer.info["won"]) == (1.0, True, True)
    with pytest.raises(ValueError, match="tool_format='json' is not valid; valid: text, native"):
        MathToolEnv(tool_format="json")


# ------------------------------------------------------------------------------------------- the gateway
GOOD = '<tool_call>\n{"name": "python", "arguments": {"code": "print(5)"}}\n</tool_call>'
BROKEN = '<tool_call>\n{"name": "python", "arguments": {"code": \n</tool_call>'


def _ask(gateway, sid, **body):
    import httpx

    return httpx.post(f"{gateway.base_url(sid)}/chat/completions", json={"model": "m", **body}, timeout=30)


def test_the_gateway_answers_calls_and_counts_the_ones_that_do_not_parse(tiny):
    pytest.importorskip("uvicorn", reason="the ecosystem extra")
    from arl.agent.gateway import RecordingGateway
    from arl.rollout.engine import SamplingParams

    _, tok = tiny
    user = [{"role": "user", "content": "2+3?"}]
    texts = [GOOD, BROKEN, "plain", GOOD, "plain"]
    with RecordingGateway(ScriptedEngine(tok, texts, eos=True, logprob=-0.5), tok, SamplingParams(temperature=1.0, max_new_tokens=64)) as gw:
        sid = gw.open_session()
        good = _ask(gw, sid, messages=user, tools=[PYTHON]).json()["choices"][0]
        assert good["finish_reason"] == "tool_calls" and good["message"]["content"] is None
        assert good["message"]["tool_calls"] == [{"id": f"call_{sid}_0_0", "type": "function", "function": {
            "name": "python", "arguments": '{"code": "print(5)"}'}}]
        broken = _ask(gw, sid, messages=user, tools=[PYTHON]).json()["choices"][0]  # back as text, not a failed request
        assert broken["finish_reason"] == "stop" and broken["message"] == {"role": "assistant", "content": BROKEN}
        required = _ask(gw, sid, messages=user, tools=[PYTHON], tool_choice="required").json()["choices"][0]
        assert required["message"]["content"] == "plain"
        named = _ask(gw, sid, messages=user, tools=[PYTHON, ADD],
                     tool_choice={"type": "function", "function": {"name": "add"}}).json()["choices"][0]
        assert named["message"]["tool_calls"][0]["function"]["name"] == "python"
        later = [*user, {"role": "assistant", "content": None, "tool_calls": good["message"]["tool_calls"]},
                 {"role": "tool", "tool_call_id": good["message"]["tool_calls"][0]["id"], "content": "5"},
                 {"role": "user", "content": [{"type": "text", "text": "and now?"}]}]
        off = _ask(gw, sid, messages=later, tools=[PYTHON], tool_choice="none").json()["choices"][0]
        assert off["message"] == {"role": "assistant", "content": "plain"} and off["finish_reason"] == "stop"
        session = gw.close_session(sid)
    assert session.invalid_requests == {
        1: session.invalid_requests[1], 2: "no tool call under tool_choice 'required'",
        3: "tool_choice names 'add'; the answer called ['python']"}
    assert "not JSON" in session.invalid_requests[1] and not session.malformed
    assert session.calls[4].messages[-1] == {"role": "user", "content": "and now?"}
    assert "<tool_response>\n5\n</tool_response>" in tok.decode(session.calls[4].prompt_ids)


@pytest.mark.parametrize("body, match", [
    ({"tools": {"python": {}}}, "'tools' must be a list"),
    ({"tools": [PYTHON], "tool_choice": "always"}, "tool_choice must be one of"),
    ({"tools": [PYTHON], "tool_choice": {"type": "function", "function": {"name": "add"}}}, "tool_choice must be"),
    ({"tool_choice": "required"}, "tool_choice 'required' needs 'tools'"),
])
def test_a_malformed_tool_request_is_refused(tiny, body, match):
    pytest.importorskip("uvicorn", reason="the ecosystem extra")
    from arl.agent.gateway import RecordingGateway
    from arl.rollout.engine import SamplingParams

    _, tok = tiny
    with RecordingGateway(ScriptedEngine(tok, [GOOD], eos=True, logprob=-0.5), tok, SamplingParams(max_new_tokens=8)) as gw:
        sid = gw.open_session()
        answer = _ask(gw, sid, messages=[{"role": "user", "content": "x"}], **body)
        gw.close_session(sid)
    assert answer.status_code == 400 and match in answer.json()["error"]["message"]


def test_streamed_calls_are_one_delta_a_call_then_the_finish():
    from arl.agent.gateway import _as_events

    calls = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
             {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"x": 1}'}}]
    completion = {"id": "c", "created": 1, "model": "m", "usage": {},
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": calls},
                               "finish_reason": "tool_calls"}]}
    events = [json.loads(e[len("data: "):]) for e in _as_events(completion, usage=False) if "[DONE]" not in e]
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas == [{"role": "assistant", "content": None}, {"tool_calls": [{"index": 0, **calls[0]}]},
                      {"tool_calls": [{"index": 1, **calls[1]}]}, {}]
    assert [e["choices"][0]["finish_reason"] for e in events] == [None, None, None, "tool_calls"]


def test_the_loop_counts_an_unparseable_call_invalid_and_sends_its_text(tiny):
    from arl.agent.loop import AgentLoop, LoopOptions, Task
    from arl.envs.math_tool.env import MSG_NONE_NATIVE
    from arl.rollout.engine import SamplingParams

    _, tok = tiny
    loop = AgentLoop(ScriptedEngine(tok, [BROKEN, GOOD], eos=True, logprob=-0.5), tok, "math_tool", {"tool_format": "native"},
                     LoopOptions(max_turns=3, progress_every=None))
    (episode,) = loop.run([Task(0, 3)], 1, SamplingParams(temperature=1.0, max_new_tokens=64))
    broken, good, _ = episode.turns
    assert (broken.valid, good.valid) == (False, True) and "not JSON" in broken.reason
    assert good.observation == MSG_NONE_NATIVE and broken.message == {"role": "assistant", "content": BROKEN}
    assert loop.conversation(episode, "x")[1:4] == [broken.message, {"role": "user", "content": MSG_NONE_NATIVE},
                                                     good.message]
    assert episode.turns[2].observation == "5"  # the call ran: its result answers it as the tool's message
    loop.close()
