"""Agent programs through the recording gateway (arl.agent.gateway, arl.agent.programs): a real uvicorn
server on localhost, the real ``openai`` client, the tiny model and its tokenizer.

- the example agent (``examples/openai_sokoban_agent.py``) plays Sokoban through the gateway: greedy, it
  plays the same episodes as the built-in agent loop, token for token and reward for reward, and the
  trainer's log-probs of the recorded calls equal the engine's;
- a program that hangs, crashes or sends garbage costs one failed episode (``env_error``), and the rollout
  goes on: the other episodes of the same rollout are played;
- the endpoint answers the ``openai`` client, refuses a malformed request (400) and an unknown session (404).
"""

from __future__ import annotations

import pytest
import torch

from arl_testing import ROOT

pytest.importorskip("uvicorn", reason="the ecosystem extra: pip install -e '.[ecosystem]'")
openai = pytest.importorskip("openai", reason="the ecosystem extra: pip install -e '.[ecosystem]'")

AGENT = ["python", str(ROOT / "examples" / "openai_sokoban_agent.py")]
GREEDY = {"temperature": 0.0, "max_new_tokens": 16}


def _program_loop(tiny, command, **kw):
    from arl.agent.programs import ProgramLoop
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    return ProgramLoop(HFEngine(model, tok), tok, command, **kw)


def test_the_example_agent_plays_the_built_in_loops_greedy_episodes(tiny):
    from arl.agent.loop import AgentLoop, LoopOptions, Task
    from arl.agent.samples import collate, turn_samples
    from arl.modules.forward import forward_log_probs
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    params = SamplingParams(**GREEDY)
    programs = _program_loop(tiny, AGENT, max_concurrency=1)
    built_in = AgentLoop(HFEngine(model, tok), tok, "sokoban", {"prompt_style": "full"},
                         LoopOptions(history_window=1, max_turns=10))
    for task in (Task(0, 5), Task(1, 6)):  # one at a time: both sides decode batches of one
        (through_gateway,) = programs.run([task], 1, params)
        (direct,) = built_in.run([task], 1, params)
        assert not through_gateway.env_error and through_gateway.num_turns == direct.num_turns >= 1
        for a, b in zip(through_gateway.turns, direct.turns):
            assert a.prompt_ids == b.prompt_ids and a.response_ids == b.response_ids
            assert a.reward == pytest.approx(b.reward) and a.valid == b.valid
            assert max(abs(x - y) for x, y in zip(a.rollout_log_probs, b.rollout_log_probs)) < 1e-5
        assert through_gateway.won == direct.won and through_gateway.ret == pytest.approx(direct.ret)
        samples = turn_samples([through_gateway])
        batch = collate(samples, tok.pad_token_id)
        with torch.no_grad():
            logp, _ = forward_log_probs(model, batch)
        m = batch["response_mask"]
        assert float(((logp - batch["rollout_log_probs"]).abs() * m).max()) < 1e-4
    built_in.close()


HANG = "import time; time.sleep(600)"
CRASH = "raise SystemExit('the agent fell over')"
GARBAGE = """
import json, os, urllib.request, urllib.error
url = os.environ['OPENAI_BASE_URL'] + '/chat/completions'
try:
    urllib.request.urlopen(urllib.request.Request(url, data=b'{"messages": "not a list"}',
                           headers={'Content-Type': 'application/json'}, method='POST'), timeout=10)
except urllib.error.HTTPError as err:
    assert err.code == 400
"""


@pytest.mark.parametrize("name, code", [("hang", HANG), ("crash", CRASH), ("garbage", GARBAGE)])
def test_a_failing_program_costs_one_failed_episode(tiny, name, code):
    """Two tasks of two members; member 1 of task 0 runs the failing program (the command picks by the
    environment), the others the example agent: one failed episode, three played."""
    from arl.agent.loop import Task
    from arl.rollout.engine import SamplingParams

    chooser = (f"import os, runpy, sys\nif os.environ['ARL_GROUP_ID'] == '0' and os.environ['ARL_MEMBER'] == '1':\n"
               f"    exec(compile({code!r}, 'failing', 'exec'))\nelse:\n"
               f"    sys.argv = [{AGENT[1]!r}]\n    runpy.run_path({AGENT[1]!r}, run_name='__main__')\n")
    loop = _program_loop(tiny, ["python", "-c", chooser], timeout_s=20.0)
    episodes = loop.run([Task(0, 5), Task(1, 6)], 2, SamplingParams(**GREEDY))  # the hang is killed at timeout_s
    failed = [(e.group_id, e.episode_id) for e in episodes if e.env_error]
    assert failed == [(0, 1)], failed
    assert all(e.num_turns >= 1 for e in episodes if not e.env_error)


def test_the_endpoint_answers_the_openai_client_and_refuses_bad_requests(tiny):
    import httpx

    from arl.agent.gateway import RecordingGateway
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    with RecordingGateway(HFEngine(model, tok), tok, SamplingParams(**GREEDY)) as gateway:
        sid = gateway.open_session()
        client = openai.OpenAI(base_url=gateway.base_url(sid), api_key="arl")
        answer = client.chat.completions.create(model="arl-policy", messages=[{"role": "user", "content": "Hello"}])
        text = answer.choices[0].message.content
        assert isinstance(text, str) and answer.usage.completion_tokens >= 1
        streamed = list(client.chat.completions.create(model="arl-policy", stream=True,
                                                       stream_options={"include_usage": True},
                                                       messages=[{"role": "user", "content": "Hello"}]))
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text  # greedy: the same
        assert streamed[-1].usage.completion_tokens == answer.usage.completion_tokens
        bad = httpx.post(f"{gateway.base_url(sid)}/chat/completions", json={"messages": [{"role": "robot"}]})
        assert bad.status_code == 400 and "role" in bad.json()["error"]["message"]
        unknown = httpx.post(f"{gateway.base_url('nosuch')}/chat/completions", json={"messages": []})
        assert unknown.status_code == 404
        keyless = httpx.post(f"http://{gateway.host}:{gateway.port}/sessions/{sid}/reward", json={"reward": 9.0})
        assert keyless.status_code == 403  # the session's URL without its key: refused, and no report made
        report = httpx.post(gateway.reward_url(sid), json={"reward": 1.5})
        assert report.status_code == 200
        session = gateway.close_session(sid)
    call, again = session.calls
    assert again.text == call.text and again.response_ids == call.response_ids
    with RecordingGateway(HFEngine(model, tok), tok, SamplingParams(**GREEDY), max_prompt_tokens=8) as gateway:
        sid = gateway.open_session()
        long = httpx.post(f"{gateway.base_url(sid)}/chat/completions",
                          json={"messages": [{"role": "user", "content": "Hello " * 20}]})
        assert long.status_code == 400 and long.json()["error"]["type"] == "context_length_exceeded"
        refused = gateway.close_session(sid)
    assert not refused.calls and "passes the rollout's max_prompt_tokens (8)" in refused.malformed
    assert call.text == text and call.messages == [{"role": "user", "content": "Hello"}]
    assert tok.decode(call.response_ids, skip_special_tokens=True) == text and len(call.log_probs) == len(call.response_ids)
    assert session.reward == 1.5 and session.won and session.malformed.startswith("each message needs a role")


# A program that keeps its conversation for three calls, then rewrites it (a fresh start) for a fourth.
KEEPS_THEN_REWRITES = """
import json, os, urllib.request
from openai import OpenAI
client = OpenAI()
messages = [{"role": "user", "content": "Task: count. State: 0"}]
for k in range(1, 4):
    answer = client.chat.completions.create(model="arl-policy", messages=messages).choices[0].message.content
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"State: {k}"}]
client.chat.completions.create(model="arl-policy", messages=[{"role": "user", "content": "Task: count. State: 3"}])
report = json.dumps({"reward": 1.0}).encode()
reward_url = os.read(int(os.environ["ARL_REWARD_FD"]), 4096).decode()
urllib.request.urlopen(urllib.request.Request(reward_url, data=report, method="POST",
                                              headers={"Content-Type": "application/json"}), timeout=30).read()
"""


def test_trajectory_samples_splice_a_kept_conversation_into_one_stream(tiny):
    """rollout.sample_mode=trajectory: the calls that continue the conversation extend one token stream, the
    answers as sampled (never tokenised again); the call that rewrote it starts a second stream; the trainer's
    log-probs of both streams equal the engine's."""
    from arl.agent.loop import Task
    from arl.agent.samples import build_samples, collate_tokens
    from arl.modules.forward import forward_log_probs
    from arl.rollout.engine import SamplingParams

    model, tok = tiny
    loop = _program_loop(tiny, ["python", "-c", KEEPS_THEN_REWRITES])
    loop.use_trajectory_samples()
    assert loop.sample_mode == "trajectory"
    (episode,) = loop.run([Task(0, 1)], 1, SamplingParams(temperature=1.0, max_new_tokens=8))
    turns = episode.turns
    assert not episode.env_error and [t.stream_start for t in turns] == [False, False, False, True]
    for k in (1, 2):  # the stream so far, then the next user message: the earlier answers' sampled ids, verbatim
        stream = turns[k - 1].prompt_ids + turns[k - 1].response_ids
        assert turns[k].prompt_ids[:len(stream)] == stream and f"State: {k}" in tok.decode(turns[k].prompt_ids[len(stream):])
    samples, table = build_samples([episode], "trajectory")
    assert len(samples) == 2 and len(table) == 4
    assert samples[0].input_ids == turns[2].prompt_ids + turns[2].response_ids
    assert samples[1].input_ids == turns[3].prompt_ids + turns[3].response_ids
    batch = collate_tokens(samples, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = forward_log_probs(model, batch)
    assert float(((logp - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max()) < 1e-4
    assert int(batch["response_mask"].sum()) == sum(len(t.response_ids) for t in turns)
