"""``env=openenv`` (arl.envs.adapters.openenv_env) on a real OpenEnv server: the higher-or-lower game of
``examples/openenv_guess_number.py``, written with openenv-core's server primitives, played through openenv-core's
client.

- by ``env.kwargs.app`` (served in this process) and by ``env.kwargs.url`` (a server process the test starts):
  the same seed plays the same game, every observation and reward checked by hand (seed 7's secret is 21,
  seed 1's is 9: ``random.Random(seed).randint(1, 50)``);
- an action the server rejects (not a number, out of range, empty) is an invalid turn, the game unchanged;
- a server killed mid-episode, and one that stops answering (SIGSTOP), fail their episodes (``env_error``) within
  the adapter's timeout, and the next rollout plays on once the server is back;
- ``src/train.py env=openenv`` runs BC-free RL iterations on the example (its app served by the env worker).

The policy of the loop tests is a scripted engine (fixed answers, the tiny model's tokenizer); the server, the
client and the adapter are the real ones. Without openenv-core (the ``openenv`` extra) these tests skip.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import scale_helpers as sh
from arl_testing import ROOT, ScriptedEngine, action_answer, compose

pytest.importorskip("openenv.core", reason="the openenv extra: pip install -e '.[openenv]'")

EXAMPLES = ROOT / "examples"
APP = "openenv_guess_number:app"
TASK = ("Find the secret number from 1 to 50 in 6 guesses. After each guess you are told whether the secret is "
        "higher or lower.")
START = "No guess yet. 6 guesses left."


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``python examples/openenv_guess_number.py --port <port>``, up once its ``/health`` answers."""

    def __init__(self, port: int | None = None, log_path=None):
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, str(EXAMPLES / "openenv_guess_number.py"), "--port", str(self.port)],
                                     stdout=self.log, stderr=self.log, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, f"the server exited with {self.proc.returncode}"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() >= deadline:  # a start-up wait, not a measured bound
                raise RuntimeError("the server did not answer /health within 60 s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.log is not subprocess.DEVNULL:
            self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One example server for the module's tests (a test that stops it resumes it)."""
    proc = ServerProcess(log_path=tmp_path_factory.mktemp("openenv") / "server.log")
    yield proc
    proc.stop()


def _play_seed_7(env) -> list:
    """Seed 7 (secret 21): three rejected actions, then 25, 12, 21; every answer by hand."""
    observation, info = env.reset(seed=7)
    assert observation == START and info["task"] == TASK and not info["won"] and not info["invalid_action"]
    results = []
    for action in ("abc", "51", ""):  # not a number, out of range, an answer that did not parse: rejected
        rejected = env.step(action)
        assert rejected.info["invalid_action"] and "VALIDATION_ERROR" in rejected.info["error"]
        assert (rejected.observation, rejected.reward, rejected.done) == (START, 0.0, False)
        results.append(rejected)
    high = env.step("25")  # the game kept its six guesses through the rejections
    assert (high.observation, high.reward, high.done) == ("25 is too high. 5 guesses left.", -0.05, False)
    assert not high.info["invalid_action"] and not high.info["won"] and high.info["task"] == TASK
    low = env.step("12")
    assert (low.observation, low.reward, low.done) == ("12 is too low. 4 guesses left.", -0.05, False)
    assert low.info["anchor"] != high.info["anchor"]
    right = env.step(" 21 ")  # pydantic reads the integer in its text
    assert (right.observation, right.reward, right.done) == ("21 is right!", 1.0, True)
    assert right.info["won"] and right.info["score"] == 1.0
    return [*results, high, low, right]


def test_the_adapter_plays_the_example_served_from_its_app():
    from arl.envs.registry import make_env

    env = make_env("openenv", app=APP)
    try:
        assert env.action_field == "guess" and env.url.startswith("http://127.0.0.1:")
        _play_seed_7(env)
        assert env.reset(seed=7)[0] == START  # a new session, the same game: the first guess of 21 wins
        assert env.step("21").info["won"]
        _, info = env.reset(seed=1)  # secret 9: six guesses of 50 lose
        assert info["task_type"] == APP
        answers = [env.step("50") for _ in range(6)]
        assert [a.done for a in answers] == [False] * 5 + [True] and not answers[-1].info["won"]
        assert answers[-1].observation == "50 is too high. No guesses left: it was 9."
        assert sum(a.reward for a in answers) == pytest.approx(-0.3)
        again = make_env("openenv", app=APP)  # a second env of this process shares the server
        assert again.url == env.url
        again.close()
    finally:
        env.close()


def test_the_adapter_plays_a_server_by_url(server):
    from omegaconf import OmegaConf

    from arl.envs.registry import make_env

    env = make_env("openenv", url=server.url + "/", observation_field="message", action_field="guess",
                   task_type="guess_number", timeout_s=10.0)
    try:
        assert env.url == server.url
        results = _play_seed_7(env)
        assert results[-1].info["task_type"] == "guess_number"
    finally:
        env.close()
    # another field as the text, won from the reward where the key is absent, constant fields from a config
    extra = OmegaConf.create({"metadata": {"source": "arl", "tags": ["a"]}})
    raw = make_env("openenv", url=server.url, observation_field="guesses_left", won_key="absent", won_reward=1.0,
                   action_extra=extra)
    try:
        assert raw.action_extra == {"metadata": {"source": "arl", "tags": ["a"]}}
        assert raw.reset(seed=0)[0] == "6"
        win = raw.step("25")  # seed 0's secret is 25
        assert win.observation == "5" and win.info["won"] and win.reward == 1.0
    finally:
        raw.close()
    wrong = make_env("openenv", url=server.url, action_extra={"hint": 1})  # not a field of the action: rejected
    try:
        wrong.reset(seed=0)
        assert wrong.step("25").info["invalid_action"]
    finally:
        wrong.close()


def test_a_bad_configuration_stops_at_start_up():
    from arl.envs.adapters.openenv_env import OpenEnvFailure, action_field_of, observation_text
    from arl.envs.registry import make_env

    with pytest.raises(ValueError, match="exactly one of env.kwargs.url"):
        make_env("openenv")
    with pytest.raises(ValueError, match="exactly one of env.kwargs.url"):
        make_env("openenv", url="http://127.0.0.1:1", app=APP)
    with pytest.raises(ImportError, match="has no attribute 'nope'"):
        make_env("openenv", app="openenv_guess_number:nope")
    nobody = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(OpenEnvFailure, match=f"no OpenEnv server answers at {nobody}"):
        make_env("openenv", url=nobody, timeout_s=2.0)
    schema = {"action": {"properties": {"metadata": {}, "x": {}, "y": {}}}}
    with pytest.raises(ValueError, match=r"has fields \['x', 'y'\]; set env.kwargs.action_field"):
        action_field_of(schema, "u")
    assert action_field_of({"action": {"properties": {"metadata": {}, "guess": {}}}}, "u") == "guess"
    assert observation_text({"prompt": "p", "message": "m"}) == "m"
    assert observation_text({"board": [1, 2], "n": 3}) == '{"board": [1, 2], "n": 3}'


def _loop(tiny, kwargs: dict, actions: list[str], before=None):
    from arl.agent.loop import AgentLoop, LoopOptions

    _, tok = tiny
    options = LoopOptions(history_window=1, max_turns=4, progress_every=None)
    return AgentLoop(ScriptedEngine(tok, [action_answer(a) for a in actions], before), tok, "openenv", kwargs, options)


def _run(loop, tasks, actions: list[str], before=None):
    from arl.agent.loop import Task
    from arl.rollout.engine import SamplingParams

    loop.engine.restart([action_answer(a) for a in actions], before)
    return loop.run([Task(g, s) for g, s in tasks], 1, SamplingParams(max_new_tokens=32))


def test_rejected_actions_are_invalid_turns_in_the_agent_loop(tiny):
    """Seed 7: "abc" is rejected by the server (reason 'rejected by env', the format penalty's samples), then
    25, 12, 21 win."""
    from arl.agent.metrics import episode_metrics
    from arl.agent.parsing import REJECTED_BY_ENV
    from arl.agent.samples import turn_samples

    loop = _loop(tiny, {"app": APP}, ["abc"])
    try:
        (episode,) = _run(loop, [(0, 7)], ["abc", "25", "12", "21"])
    finally:
        loop.close()
    assert [t.valid for t in episode.turns] == [False, True, True, True] and episode.won and not episode.env_error
    assert episode.turns[0].reason == REJECTED_BY_ENV and episode.turns[0].reward == 0.0
    assert [t.observation for t in episode.turns] == [START, START, "25 is too high. 5 guesses left.",
                                                      "12 is too low. 4 guesses left."]
    assert [t.reward for t in episode.turns] == pytest.approx([0.0, -0.05, -0.05, 1.0])
    assert [s.valid for s in turn_samples([episode])] == [False, True, True, True]
    assert episode_metrics([episode])["rollout/valid_action_ratio"] == pytest.approx(3 / 4)


def test_a_killed_server_fails_its_episodes_and_the_next_rollout_plays(tiny, tmp_path):
    """The server is killed before the second turn's steps: both episodes fail (env_error) at once, the rollout
    returns; a server on the same port serves the next rollout, which wins."""
    server = ServerProcess(log_path=tmp_path / "server.log")
    loop = _loop(tiny, {"url": server.url, "timeout_s": 10.0}, ["25"])
    try:
        kill = lambda k: k == 1 and server.proc.kill()
        first = _run(loop, [(0, 7), (1, 1)], ["25"], before=kill)  # returns: the dead server stalls nothing
        assert all(e.env_error and not e.won for e in first) and [e.num_turns for e in first] == [2, 2]
        assert loop.pool.errors == 2
        server.proc.wait(timeout=10)
        back = ServerProcess(port=server.port, log_path=tmp_path / "server_back.log")
        try:
            (after,) = _run(loop, [(0, 7)], ["25", "12", "21"])
            assert after.won and not after.env_error and [t.valid for t in after.turns] == [True] * 3
        finally:
            back.stop()
    finally:
        loop.close()
        server.stop()


def test_a_hanging_server_fails_its_episodes_within_the_timeout(tiny, server):
    """The server is stopped (SIGSTOP) before the second turn's steps: each step times out after 1 s and fails
    its episode; resumed, the server serves the next rollout."""
    loop = _loop(tiny, {"url": server.url, "timeout_s": 1.0}, ["25"])
    try:
        stop = lambda k: k == 1 and os.kill(server.proc.pid, signal.SIGSTOP)
        hung = _run(loop, [(0, 7), (1, 1)], ["25"], before=stop)  # returns: each step gave up at the timeout
        assert all(e.env_error and not e.won for e in hung)
        assert loop.pool.errors == 2
        os.kill(server.proc.pid, signal.SIGCONT)
        (after,) = _run(loop, [(0, 7)], ["25", "12", "21"])
        assert after.won and not after.env_error
    finally:
        loop.close()


def test_train_runs_rl_on_the_example_served_by_the_env_worker(tmp_path):
    """``src/train.py env=openenv env.kwargs.app=...`` with one env worker process (which serves the app):
    two BC-free RL iterations, validations at 0 and 2 whose episodes played the example's game."""
    args = [f"env.kwargs.app={APP}", "env=openenv", "debug=smoke", "bc.enabled=false", "rl.iterations=2",
            "rl.val_every=2", "rollout.val_episodes=2", "rollout.max_new_tokens=16", "env.max_turns=3",
            "env.kwargs.max_turns=3", "algo.filter.name=none", "rollout.n_workers=1", f"paths.log_dir={tmp_path}",
            "task_name=openenv", "env.kwargs.answer_hint=a number from 1 to 50"]
    env = sh.subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "openenv" / "runs").iterdir()
    files = sorted((run_dir / "val_episodes").glob("iter*.jsonl"))
    assert [f.name for f in files] == ["iter0.jsonl", "iter2.jsonl"]
    for path in files:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(records) == 2 and not any(r["env_error"] for r in records)
        assert all(r["task_type"] == APP and r["turn_log"][0]["observation"] == START for r in records)


def test_a_missing_package_stops_the_run_naming_the_extra(monkeypatch):
    import importlib.util

    from arl.run.checks import validate_config
    from arl.utils.config import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openenv" else real(name, *a))
    with pytest.raises(ConfigError, match=r"env=openenv needs the 'openenv' package: pip install -e '.\[openenv\]'"):
        validate_config(compose(["env=openenv", f"env.kwargs.app={APP}", "bc.enabled=false"]))
