"""Hostile agent programs through ``env=program`` (arl.agent.programs, arl.agent.gateway): the real uvicorn
gateway on localhost, the tiny model, one program a behaviour. Each bad episode is a failed episode (counted,
not trained on), every other episode of the rollout plays, and no reward reaches training from outside an
episode's one good report."""

from __future__ import annotations

import pytest

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
REWARD_URL = os.read(int(os.environ['ARL_REWARD_FD']), 4096).decode()
for _ in range(CALLS):
    post(base + '/chat/completions', json.dumps({'messages': [{'role': 'user', 'content': 'Hi'}]}).encode())
"""

BEHAVIOURS = {
    "good": ("CALLS = 2", "post(REWARD_URL, b'{\"reward\": 1.0, \"won\": true}')"),
    "nan-reward": ("CALLS = 1", "post(REWARD_URL, b'{\"reward\": NaN}')"),
    "infinite-reward": ("CALLS = 1", "post(REWARD_URL, b'{\"reward\": Infinity}')"),
    "won-as-a-string": ("CALLS = 1", "post(REWARD_URL, b'{\"reward\": 0.0, \"won\": \"false\"}')"),
    "nan-in-rewards": ("CALLS = 1", "post(REWARD_URL, b'{\"reward\": 1.0, \"rewards\": [NaN]}')"),
    "rewards-miscounted": ("CALLS = 2", "post(REWARD_URL, b'{\"reward\": 1.0, \"rewards\": [1.0]}')"),
    "invalid-call-out-of-range": ("CALLS = 1",
                                  "post(REWARD_URL, b'{\"reward\": 1.0, \"invalid_calls\": [5]}')"),
    "second-report": ("CALLS = 1", ("post(REWARD_URL, b'{\"reward\": 0.0}')\n"
                                    "post(REWARD_URL, b'{\"reward\": 1.0, \"won\": true}')")),
    "not-json": ("CALLS = 1", "post(REWARD_URL, b'reward=1')"),
    "several-choices": ("CALLS = 0", ("post(base + '/chat/completions', json.dumps({'messages': [{'role': 'user', "
                                      "'content': 'Hi'}], 'n': 5}).encode())\n"
                                      "post(REWARD_URL, b'{\"reward\": 1.0, \"won\": true}')")),
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


GOOD = CALL_THEN.replace("for _ in range(CALLS)", "CALLS = 1\nfor _ in range(CALLS)") + BEHAVIOURS["good"][1] + "\n"

# a child that detaches (its own session), outlives the program and reports a win a second later
CHILD = """
import json, os, time, urllib.request
time.sleep(1.0)
open(os.environ['MARK'], 'w').write('alive')
url = os.environ['OPENAI_BASE_URL'].rsplit('/v1', 1)[0] + '/reward'  # all a child can know of it
urllib.request.urlopen(urllib.request.Request(url, data=json.dumps({'reward': 9.0, 'won': True})
                       .encode(), headers={'Content-Type': 'application/json'}, method='POST'), timeout=5)
"""
DETACHED_CHILD = CALL_THEN.replace("for _ in range(CALLS)", "CALLS = 1\nfor _ in range(CALLS)") + f"""
import subprocess, sys
subprocess.Popen([sys.executable, '-c', {CHILD!r}], start_new_session=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
post(REWARD_URL, b'{{"reward": 0.0, "won": false}}')
"""


@pytest.mark.parametrize("isolation, detach", [("pid_namespace", True), ("process_group", False),
                                               ("process_group", True)])
def test_nothing_a_program_started_outlives_it_nor_reports_for_it(tiny, tmp_path, isolation, detach):
    """The program reports a loss and leaves a child that would report a win a second later: the loss stands
    (the session closed with the program: the child's report is refused), and the child is killed with the
    program, in its PID namespace, or in its process group unless it left the group (``setsid``: the one
    escape of ``process_group`` isolation, docs/environments.md)."""
    import os
    import time

    from arl.agent.programs import pid_namespace_works

    if isolation == "pid_namespace" and not pid_namespace_works():
        pytest.skip("bubblewrap cannot make a PID namespace here")
    mark = tmp_path / "mark"
    program = DETACHED_CHILD if detach else DETACHED_CHILD.replace("start_new_session=True", "start_new_session=False")
    os.environ["MARK"] = str(mark)
    try:
        (episode,) = _play(tiny, ["python", "-c", program], n_tasks=1, isolation=isolation, pass_env=["MARK"])
    finally:
        del os.environ["MARK"]
    assert not episode.env_error and not episode.won and episode.ret == 0.0
    time.sleep(2.0)
    if not (isolation == "process_group" and detach):
        assert not mark.exists()  # the child never ran on past its program


def test_the_program_gets_no_secret_of_the_trainer(tiny, tmp_path):
    """A variable outside the allow-list (a tracker key) does not reach the program; PATH and the episode's do."""
    import ast
    import os

    seen = tmp_path / "seen.txt"
    spy = GOOD + f"open({str(seen)!r}, 'w').write(repr(sorted(os.environ)))\n"
    os.environ["WANDB_API_KEY"] = "secret"
    try:
        (episode,) = _play(tiny, ["python", "-c", spy], n_tasks=1)
    finally:
        del os.environ["WANDB_API_KEY"]
    names = ast.literal_eval(seen.read_text())  # the list the test's own program wrote
    assert not episode.env_error
    assert "WANDB_API_KEY" not in names and {"PATH", "OPENAI_BASE_URL", "ARL_REWARD_FD", "ARL_TASK_SEED"} <= set(names)


# a tool the program runs (model-written code, say) that tries every way to report a win for it
TOOL = """
import json, os, sys, urllib.request, urllib.error
seen = {'env': sorted(k for k in os.environ if 'REWARD' in k and k != 'ARL_REWARD_FD')}
try:
    seen['fd'] = os.read(int(os.environ['ARL_REWARD_FD']), 4096).decode()
except OSError as err:
    seen['fd'] = type(err).__name__
url = os.environ['OPENAI_BASE_URL'].rsplit('/v1', 1)[0] + '/reward'
for guess in (url, url + '/0123456789abcdef0123456789abcdef'):
    request = urllib.request.Request(guess, data=b'{"reward": 9.0, "won": true}', method='POST',
                                     headers={'Content-Type': 'application/json'})
    try:
        seen[guess[-6:]] = urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as err:
        seen[guess[-6:]] = err.code
open(os.environ['SEEN'], 'w').write(json.dumps(seen))
"""


def test_the_tools_a_program_runs_cannot_report_for_it(tiny, tmp_path):
    """The reward URL reaches the program alone (read once from its pipe, in no variable): a tool it starts finds
    no reward URL in its environment, nothing in the pipe, and a report without the session's key is refused
    (403); the program's own report (a loss) stands."""
    import json
    import os

    seen = tmp_path / "seen.json"
    program = CALL_THEN.replace("for _ in range(CALLS)", "CALLS = 1\nfor _ in range(CALLS)") + (
        f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {TOOL!r}], check=True)\n"
        "post(REWARD_URL, b'{\"reward\": 0.0, \"won\": false}')\n")
    os.environ["SEEN"] = str(seen)
    try:
        (episode,) = _play(tiny, ["python", "-c", program], n_tasks=1, pass_env=["SEEN"])
    finally:
        del os.environ["SEEN"]
    assert not episode.env_error and not episode.won and episode.ret == 0.0
    found = json.loads(seen.read_text())
    assert found["env"] == [] and found["fd"] in ("OSError", "")  # closed in the tool, or already read
    assert [code for key, code in found.items() if key not in ("env", "fd")] == [403, 403]


@pytest.mark.parametrize("name, code", [
    ("non-utf8-output", ("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe' * 100000)\n"
                         "sys.stderr.buffer.write(b'\\xff')\nraise SystemExit(3)")),
    ("much-output", "import sys\nsys.stdout.write('x' * 50_000_000)\n"),
])
def test_program_output_of_any_size_or_encoding_fails_at_most_its_episode(tiny, name, code):
    chooser = (f"import os\nbad, good = {code!r}, {GOOD!r}\n"
               "exec(compile(bad if os.environ['ARL_GROUP_ID'] == '0' else good, 'program', 'exec'))\n")
    episodes = _play(tiny, ["python", "-c", chooser])
    assert [e.env_error for e in episodes] == [True, False], name  # "much-output" made no call: failed


def test_a_program_that_cannot_start_fails_its_episodes(tiny):
    episodes = _play(tiny, ["/no/such/interpreter", "agent.py"])
    assert [e.env_error for e in episodes] == [True, True]


def test_too_many_calls_or_a_huge_body_fail_only_their_episode(tiny):
    many = CALL_THEN.replace("for _ in range(CALLS)", "CALLS = 6\nfor _ in range(CALLS)") + BEHAVIOURS["good"][1] + "\n"
    huge = GOOD.replace("'content': 'Hi'", "'content': 'Hi ' * 3_000_000")
    for bad in (many, huge):
        chooser = (f"import os\nbad, good = {bad!r}, {GOOD!r}\n"
                   "exec(compile(bad if os.environ['ARL_GROUP_ID'] == '0' else good, 'program', 'exec'))\n")
        episodes = _play(tiny, ["python", "-c", chooser], max_calls=4)
        assert [e.env_error for e in episodes] == [True, False]  # the good one did not time out behind it


def test_stop_waits_for_the_engine_call_in_progress(tiny):
    """The learner may update the policy once the gateway has stopped: stop() returns only after the engine call
    in progress ended (a slow engine: generation takes 3 s), and a call that ends after its session closed is
    not recorded into it."""
    import threading
    import time

    import httpx

    from arl.agent.gateway import RecordingGateway
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine

    class SlowEngine(HFEngine):
        busy = False

        def generate(self, prompts, params):
            SlowEngine.busy = True
            time.sleep(3.0)
            try:
                return super().generate(prompts, params)
            finally:
                SlowEngine.busy = False

    model, tok = tiny
    gateway = RecordingGateway(SlowEngine(model, tok), tok, SamplingParams(**GREEDY)).start()
    sid = gateway.open_session()
    answers = []
    caller = threading.Thread(target=lambda: answers.append(httpx.post(
        f"{gateway.base_url(sid)}/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]},
        timeout=30).status_code))
    caller.start()
    time.sleep(1.0)
    assert SlowEngine.busy
    session = gateway.close_session(sid)  # the episode ends while its call is sampled
    gateway.stop()
    assert not SlowEngine.busy  # stop() came back after the engine call, not during it
    caller.join(timeout=30)
    assert answers in ([404], [500]) and session.calls == []  # the late call was not recorded into the closed session
