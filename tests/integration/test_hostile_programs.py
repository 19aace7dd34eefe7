"""Hostile agent programs through ``env=program`` (arl.agent.programs, arl.agent.gateway): the real uvicorn
gateway on localhost, the tiny model, one program a behaviour. Each bad episode is a failed episode (counted,
not trained on), every other episode of the rollout plays, and no reward reaches training from outside an
episode's one good report."""

from __future__ import annotations

import pytest

from arl_testing import ROOT

pytest.importorskip("uvicorn", reason="the ecosystem extra: pip install -e '.[ecosystem]'")

GREEDY = {"temperature": 0.0, "max_new_tokens": 8}

# one call to the model, then the report the behaviour sends (raw bytes: NaN is valid JSON to Python's parser)
CALL_THEN = """
import json, os, urllib.request
def post(url, data):
    request = urllib.request.Request(url, data=data, headers={'Content-Type': 'application/json'}, method='POST')
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as err:
        return err.code
base = os.environ['OPENAI_BASE_URL']
for _ in range(CALLS):
    post(base + '/chat/completions', json.dumps({'messages': [{'role': 'user', 'content': 'Hi'}]}).encode())
"""

BEHAVIOURS = {
    "good": ("CALLS = 2", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 1.0, \"won\": true}')"),
    "nan-reward": ("CALLS = 1", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": NaN}')"),
    "infinite-reward": ("CALLS = 1", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": Infinity}')"),
    "won-as-a-string": ("CALLS = 1", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 0.0, \"won\": \"false\"}')"),
    "nan-in-rewards": ("CALLS = 1", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 1.0, \"rewards\": [NaN]}')"),
    "rewards-miscounted": ("CALLS = 2", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 1.0, \"rewards\": [1.0]}')"),
    "invalid-call-out-of-range": ("CALLS = 1",
                                  "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 1.0, \"invalid_calls\": [5]}')"),
    "second-report": ("CALLS = 1", "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 0.0}')\n"
                                   "post(os.environ['ARL_REWARD_URL'], b'{\"reward\": 1.0, \"won\": true}')"),
    "not-json": ("CALLS = 1", "post(os.environ['ARL_REWARD_URL'], b'reward=1')"),
}


def _program(name: str) -> list[str]:
    calls, report = BEHAVIOURS[name]
    return ["python", "-c", CALL_THEN.replace("CALLS = ", "CALLS = ").replace("for _ in range(CALLS)",
            f"{calls}\nfor _ in range(CALLS)") + report + "\n"]


def _play(tiny, command, n_tasks=2, **kw):
    from arl.agent.loop import Task
    from arl.agent.programs import ProgramLoop
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    loop = ProgramLoop(HFEngine(model, tok), tok, command, timeout_s=60.0, **kw)
    return loop.run([Task(i, 10 + i) for i in range(n_tasks)], 1, SamplingParams(**GREEDY))


def test_a_good_report_trains(tiny):
    episodes = _play(tiny, _program("good"))
    assert [e.env_error for e in episodes] == [False, False]
    assert all(e.won and e.num_turns == 2 and e.ret == 1.0 for e in episodes)
    assert all(e.turns[-1].reward == 1.0 and e.turns[0].reward == 0.0 for e in episodes)  # the return on the last


@pytest.mark.parametrize("name", [n for n in BEHAVIOURS if n != "good"])
def test_a_bad_report_fails_only_its_episode(tiny, name):
    """Task 0 runs the bad behaviour, task 1 the good one: one failed episode, one played, no NaN anywhere."""
    import math

    chooser = (f"import os, sys, subprocess\nbad, good = {_program(name)[2]!r}, {_program('good')[2]!r}\n"
               "exec(compile(bad if os.environ['ARL_GROUP_ID'] == '0' else good, 'program', 'exec'))\n")
    episodes = _play(tiny, ["python", "-c", chooser])
    assert [e.env_error for e in episodes] == [True, False], name
    assert not episodes[0].won and episodes[1].won
    assert all(math.isfinite(t.reward) for e in episodes for t in e.turns)


def test_per_call_rewards_follow_the_order_of_the_requests(tiny):
    """Two calls that ended in the other order than they came in (concurrent calls): the report's call k is the
    k-th request, whatever order the calls ended in; without per-call rewards the return goes to the last turn."""
    from arl.agent.gateway import Call, Session
    from arl.agent.loop import Task
    from arl.agent.programs import ProgramLoop
    from arl.rollout.hf_engine import HFEngine

    model, tok = tiny
    loop = ProgramLoop(HFEngine(model, tok), tok, ["python", "-c", "pass"])

    def call(content, index, request):
        return Call([{"role": "user", "content": content}], [1, 2], [3], [-0.5], "a", "stop", index=index,
                    request=request)

    # the second request ended first: it is the session's call 0 by completion, call 1 by request
    session = Session(calls=[call("second", 0, 1), call("first", 1, 0)], reward=2.0, rewards=(5.0, 7.0),
                      invalid_calls=(1,))
    episode = loop._episode(session, Task(0, 1), 0, "")
    assert [t.observation for t in episode.turns] == ["first", "second"]  # in the order they came in
    assert [t.reward for t in episode.turns] == [5.0, 7.0] and [t.valid for t in episode.turns] == [True, False]
    session = Session(calls=[call("second", 0, 1), call("first", 1, 0)], reward=2.0)
    assert [t.reward for t in loop._episode(session, Task(0, 1), 0, "").turns] == [0.0, 2.0]
