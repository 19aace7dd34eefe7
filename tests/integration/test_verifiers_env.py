"""verifiers environments through the recording gateway (arl.agent.verifiers_loop, ``env=verifiers``): real
verifiers 0.4 multi-turn environments (a ``verifiers.v1`` Env and Taskset this test defines, and the example's),
played by the tiny model with verifiers' own chat harness in a subprocess, a real uvicorn gateway.

- the environment's replies reach the model, its rubric is the episode's reward, a group's members play one task,
  an episode is one token stream (trajectory samples: the harness keeps its conversation, the gateway splices
  it), and the trainer's log-probs of the recorded calls equal the engine's;
- an environment that raises costs its episodes (failed, ``env_error``) and the rollout goes on;
- ``src/train.py env=verifiers`` runs BC-free RL iterations on the example, and the viewer reads the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import scale_helpers as sh
from arl_testing import ROOT

pytest.importorskip("verifiers.v1", reason="the ecosystem extra: pip install -e '.[ecosystem]'")
pytest.importorskip("uvicorn", reason="the ecosystem extra: pip install -e '.[ecosystem]'")

# A multi-turn environment: a narrator (not trainable, on the run's model too) speaks first and after every reply of
# the player, and the env answers every reply of the player with the turn's number and counts the replies; the task of index 1 raises inside
# run() (a broken environment). Its rubric: replies / 10, weight 1 (and the narrator's own reward, 5, untrained).
TURNS_ENV = textwrap.dedent('''
    import itertools
    import verifiers.v1 as vf

    class TurnsData(vf.TaskData):
        info: dict

    class TurnsTask(vf.Task[TurnsData, vf.State, vf.TaskConfig]):
        pass

    class TurnsConfig(vf.TasksetConfig):
        pass

    class TurnsEnvConfig(vf.EnvConfig):
        narrator: vf.AgentConfig = vf.AgentConfig(max_turns=8)
        player: vf.AgentConfig = vf.AgentConfig(max_turns=3)

    class TurnsEnv(vf.Env[TurnsEnvConfig]):
        async def setup(self, agents):
            agents.narrator.trainable = False

        async def run(self, task, agents):
            if task.data.info["broken"]:
                raise RuntimeError("the environment fell over")
            opening = vf.Task(vf.TaskData(idx=task.data.idx, prompt="Narrate an opening."))
            replies = 0
            async with (agents.narrator.interaction(opening) as narration,
                        agents.player.interaction(task) as interaction):
                await narration.turn()
                segment = await interaction.turn()
                while not segment.terminated:
                    replies += 1
                    await narration.turn(f"The player spoke ({replies}).")  # between the player's calls
                    segment = await interaction.turn(f"Turn {replies} of task {task.data.info['index']} noted.")
            narration.trace.record_reward("narrated", 5.0, 1.0)
            interaction.trace.record_reward("replies", replies / 10, 1.0)

    class TurnsTaskset(vf.Taskset[TurnsTask, TurnsConfig]):
        def load(self):
            for i in range(6):
                yield TurnsTask(TurnsData(name=f"turns#{i}", prompt=f"Task {i}: say anything.",
                                          info={"index": i, "broken": i == 1}), self.config.task)

    __all__ = ["TurnsEnv", "TurnsTaskset"]
''')
PARAMS = {"temperature": 1.0, "max_new_tokens": 8}


@pytest.fixture
def turns_loop(tiny, tmp_path, monkeypatch):
    from arl.agent.verifiers_loop import VerifiersLoop
    from arl.rollout.hf_engine import HFEngine

    (tmp_path / "arl_test_vf_turns.py").write_text(TURNS_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    model, tok = tiny
    return VerifiersLoop(HFEngine(model, tok), tok, id="arl_test_vf_turns", num_tasks=4, num_val_tasks=2,
                         won_reward="replies")


@pytest.mark.long  # over a minute of a worker: make test-long, run by CI after make test
def test_a_multi_turn_env_plays_through_the_gateway_its_rubric_the_reward_and_a_raising_one_fails(tiny, turns_loop):
    from arl.agent.loop import Task
    from arl.agent.records import episode_record
    from arl.agent.samples import build_samples, collate_tokens
    from arl.envs.base import VAL_SEED_BASE
    from arl.modules.forward import forward_log_probs
    from arl.rollout.engine import SamplingParams

    model, tok = tiny
    turns_loop.use_trajectory_samples()  # the harness keeps its conversation: one token stream an episode
    tasks = [Task(0, 2), Task(1, 1), Task(2, VAL_SEED_BASE + 1)]  # seed 1 plays task 1, whose run() raises
    episodes = turns_loop.run(tasks, 2, SamplingParams(**PARAMS))
    assert [(e.group_id, e.episode_id) for e in episodes] == [(g, 2 * g + m) for g in range(3) for m in range(2)]
    assert [e.env_error for e in episodes] == [False, False, True, True, False, False]  # the rollout went on
    assert not any(e.won for e in episodes[2:4])
    played = episodes[:2] + episodes[4:]
    for e, index in zip(played, (2, 2, 5, 5)):  # training seed 2: task 2; validation seed 1: task 4 + 1
        assert not e.env_error and e.num_turns == 3 and e.task_type == "arl_test_vf_turns" and e.won
        assert f"Task {index}: say anything." in tok.decode(e.turns[0].prompt_ids)  # the player's, not the narrator's
        assert not any("Narrate an opening." in tok.decode(t.prompt_ids) for t in e.turns)
        assert not any("The player spoke" in tok.decode(t.prompt_ids) for t in e.turns)
        for k, turn in enumerate(e.turns[1:], start=1):  # the env's reply to the last answer reached the model
            assert f"Turn {k} of task {index} noted." in tok.decode(turn.prompt_ids)
            # the earlier answer's text as sampled, special tokens included (the stream holds its ids verbatim)
            assert tok.decode(e.turns[k - 1].response_ids) in tok.decode(turn.prompt_ids)
        # the rubric: the env counted 3 replies, weight 1 (the narrator's 5 is not the player's); on the last call
        assert [t.reward for t in e.turns] == [0.0, 0.0, pytest.approx(0.3)] and e.ret == pytest.approx(0.3)
        assert not any(t.stream_start for t in e.turns)  # the narrator's calls between did not break the stream
        for k in (1, 2):  # the earlier answers' sampled ids, verbatim, then the env's reply
            assert e.turns[k].prompt_ids[:len(e.turns[k - 1].prompt_ids) + len(e.turns[k - 1].response_ids)] == (
                e.turns[k - 1].prompt_ids + e.turns[k - 1].response_ids)
    samples, table = build_samples(played, "trajectory")
    assert len(samples) == 4 and len(table) == 12
    batch = collate_tokens(samples, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = forward_log_probs(model, batch)
    assert float(((logp - batch["rollout_log_probs"]).abs() * batch["response_mask"]).max()) < 1e-4
    record = episode_record(played[0])
    assert len(record["turn_log"]) == 3 and all("response" in t and "anchor" in t for t in record["turn_log"])


@pytest.mark.long  # over a minute: make test-long, run by CI after make test
def test_train_runs_rl_on_the_example_verifiers_env_and_the_viewer_reads_it(tmp_path):
    from arl.analysis.viewer import page_data, write_viewer

    args = ["env=verifiers", "env.kwargs.id=verifiers_guess_number", "env.kwargs.won_reward=won", "env.kwargs.num_tasks=8",
            "env.kwargs.num_val_tasks=2", "+env.kwargs.env_args.player.max_turns=2", "debug=smoke", "bc.enabled=false",
            "rl.iterations=2", "rl.val_every=2", "rollout.val_episodes=2", "rollout.max_new_tokens=8",
            "algo.filter.name=none", f"paths.log_dir={tmp_path}", "task_name=verifiers"]
    env = sh.subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "examples"), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), *args], capture_output=True, text=True,
                          timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "verifiers" / "runs").iterdir()
    data = page_data(run_dir)
    assert [v["iteration"] for v in data["validations"]] == [0, 2]
    html = write_viewer(run_dir, run_dir / "viewer.html")
    assert html.exists() and html.stat().st_size > 1000
