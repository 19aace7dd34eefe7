"""The per-episode schedule against the lockstep one, on the real tiny model and every env.

Greedy: the same episodes token for token (the transformers engine is batch-invariant on the tiny
model to the last bit of argmax; log-probs to float noise). Sampling: each request draws from its
own seed, so the same tasks give the same episodes whatever the batch width (which changes when
requests finish and which rows decode together), and the trainer's recomputed log-probs equal the
engine's."""

import logging

import pytest
import torch

from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.agent.samples import build_samples, collate_tokens
from arl.modules.forward import forward_log_probs
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine

SOKOBAN = {"dim_room": [6, 6], "num_boxes": 1, "max_steps": 6, "prompt_style": "compact"}
ENVS = {
    "sokoban": SOKOBAN,
    "alfworld": {"data_source": "generated", "num_games": {"train": 4}, "prompt_style": "compact", "max_steps": 4},
    "webshop": {},
    "math_tool": {},
}


def _loop(tiny, schedule, env="sokoban", kwargs=SOKOBAN, max_batch_size=64, max_turns=4, **kw):
    model, tok = tiny
    return AgentLoop(HFEngine(model, tok, max_batch_size=max_batch_size), tok, env, kwargs,
                     LoopOptions(history_window=1, max_turns=max_turns, schedule=schedule, **kw))


def _trace(episodes):
    return [(e.group_id, e.episode_id, e.seed, e.won, e.env_error, e.context_full,
             [(t.prompt_ids, t.response_ids, t.action, t.valid, t.reward, t.done, t.truncated, t.anchor_key)
              for t in e.turns])
            for e in episodes]


def _log_prob_gap(a, b) -> float:
    return max((abs(x - y) for ea, eb in zip(a, b) for ta, tb in zip(ea.turns, eb.turns)
                for x, y in zip(ta.rollout_log_probs, tb.rollout_log_probs)), default=0.0)


def _run(loop, tasks, group_size, params, **kw):
    try:
        return loop.run(tasks, group_size=group_size, params=params, **kw)
    finally:
        loop.close()


@pytest.mark.parametrize("env", list(ENVS))
def test_greedy_episode_schedule_equals_lockstep(tiny, env):
    """Acceptance: under greedy decoding both schedules give the same episodes (ids, rewards,
    turns), log-probs to float noise, with a batch narrower than the episodes (rows refilled), and
    with the env steps in two workers running beside the decoding."""
    pytest.importorskip("alfworld") if env == "alfworld" else None
    tasks = [Task(g, 300 + g) for g in range(3)]
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    lock = _run(_loop(tiny, "lockstep", env, ENVS[env]), tasks, 2, params)
    each = _run(_loop(tiny, "episode", env, ENVS[env], max_batch_size=4), tasks, 2, params)
    beside = _run(_loop(tiny, "episode", env, ENVS[env], max_batch_size=4, n_workers=2), tasks, 2, params)
    assert _trace(each) == _trace(lock) == _trace(beside)
    assert sum(e.num_turns for e in lock) > len(lock)  # episodes went past their first turn
    assert _log_prob_gap(each, lock) < 1e-5


def test_greedy_trajectory_mode_and_full_context_match(tiny):
    """Trajectory samples and the ``max_prompt_tokens`` end follow the same rules in both schedules."""
    tasks = [Task(0, 31), Task(1, 32)]
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    kw = {"sample_mode": "trajectory", "max_prompt_tokens": 200, "max_turns": 6}
    lock = _run(_loop(tiny, "lockstep", **kw), tasks, 2, params)
    each = _run(_loop(tiny, "episode", max_batch_size=3, **kw), tasks, 2, params)
    assert _trace(each) == _trace(lock)
    assert any(e.context_full for e in each)


def test_sampled_episodes_do_not_depend_on_the_batch(tiny):
    """The same seeds give the same episodes twice, and with other batch widths, which change the
    order in which requests finish and which rows share a forward."""
    tasks = [Task(g, 500 + g) for g in range(3)]
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=20)
    runs = [_trace(_run(_loop(tiny, "episode", max_batch_size=width), tasks, 3, params)) for width in (64, 64, 2, 5)]
    assert runs[0] == runs[1] == runs[2] == runs[3]
    lengths = {len(t[1]) for ep in runs[0] for t in ep[6]}
    assert len(lengths) > 1  # answers of several lengths: rows did finish at different steps


def test_recomputed_log_probs_equal_the_engines(tiny):
    """The trainer scores exactly the sampled ids; its log-probs equal the rollout's (fp32 noise)."""
    model, tok = tiny
    episodes = _run(_loop(tiny, "episode", max_batch_size=3), [Task(0, 11), Task(1, 12)], 3,
                    SamplingParams(temperature=0.8, max_new_tokens=16))
    samples, _turns = build_samples(episodes, "turn")
    batch = collate_tokens(samples, tok.pad_token_id)
    with torch.no_grad():
        logp, _ = forward_log_probs(model, batch, temperature=0.8)
    m = batch["response_mask"]
    assert float(((logp - batch["rollout_log_probs"]).abs() * m).max()) < 1e-4


def test_teacher_labels_and_failing_envs(tiny):
    """DAgger's teacher labels every turn; a failing environment loses only its own episode."""
    teacher = "arl.envs.sokoban.expert:expert_response"
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    tasks = [Task(0, 41), Task(1, 42)]
    lock = _run(_loop(tiny, "lockstep"), tasks, 2, params, teacher=teacher)
    each = _run(_loop(tiny, "episode", max_batch_size=2), tasks, 2, params, teacher=teacher)
    assert [[t.expert_text for t in e.turns] for e in each] == [[t.expert_text for t in e.turns] for e in lock]
    assert all(t.expert_text for e in each for t in e.turns)

    loop = _loop(tiny, "episode", env="faulty_env:FaultyEnv", kwargs={"length": 3}, n_workers=2, step_timeout=1.0)
    loop.pool.worker_grace = 1.0
    seeds = [1, 3, 11]  # 3 raises at its second step
    episodes = _run(loop, [Task(i, s) for i, s in enumerate(seeds)], 1, SamplingParams(temperature=1.0, max_new_tokens=4))
    assert {e.seed for e in episodes if e.env_error} == {3}
    assert all(e.num_turns == 3 and e.won for e in episodes if not e.env_error)


def test_progress_and_occupancy(tiny, caplog):
    """A long rollout logs episodes finished, tokens and turns/s; the stats say how full the batches were."""
    loop = _loop(tiny, "episode", max_batch_size=4, progress_every=0.0)
    with caplog.at_level(logging.INFO, logger="arl.agent.loop"):
        episodes = _run(loop, [Task(0, 61), Task(1, 62)], 3, SamplingParams(temperature=1.0, max_new_tokens=10))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rollout:")]
    assert lines and "episodes finished" in lines[-1] and "turns/s" in lines[-1]
    stats = loop.last_stats
    assert stats.env_steps == sum(e.num_turns for e in episodes)
    assert stats.generated_tokens == sum(len(t.response_ids) for e in episodes for t in e.turns)
    assert 1 <= stats.rows_per_step <= 4


def test_episode_schedule_needs_a_streaming_engine(tiny):
    class Plain:
        def generate(self, prompts, params, seeds=None):
            return []

    _, tok = tiny
    with pytest.raises(ValueError, match="schedule=episode needs a streaming engine"):
        AgentLoop(Plain(), tok, "sokoban", SOKOBAN, LoopOptions(schedule="episode"))
    with pytest.raises(ValueError, match="schedule='sometimes' is not valid"):
        AgentLoop(Plain(), tok, "sokoban", SOKOBAN, LoopOptions(schedule="sometimes"))


def test_an_error_mid_rollout_leaves_no_request_behind(tiny):
    """A turn that fails (here a prompt past ``max_prompt_tokens`` at the second turn) stops the
    rollout with its error and drops the requests in flight: the next rollout on the same engine
    gets exactly what a fresh engine gives."""
    model, tok = tiny
    tasks, params = [Task(0, 71), Task(1, 72)], SamplingParams(temperature=0.0, max_new_tokens=12)
    probe = _run(_loop(tiny, "episode", kwargs={**SOKOBAN, "prompt_style": "full"}), tasks, 2, params)
    first = min(len(e.turns[0].prompt_ids) for e in probe)
    later = max(len(t.prompt_ids) for e in probe for t in e.turns[1:])
    assert later > first
    engine = HFEngine(model, tok, max_batch_size=2)
    loop = AgentLoop(engine, tok, "sokoban", {**SOKOBAN, "prompt_style": "full"},
                     LoopOptions(history_window=1, max_turns=4, schedule="episode", max_prompt_tokens=first))
    with pytest.raises(ValueError, match="exceeds rollout.max_prompt_tokens"):
        loop.run(tasks, group_size=2, params=params)
    assert engine.in_flight == 0
    again = AgentLoop(engine, tok, "sokoban", SOKOBAN, LoopOptions(history_window=1, max_turns=4, schedule="episode"))
    fresh = _loop(tiny, "episode", max_batch_size=2)
    assert _trace(_run(again, tasks, 2, params)) == _trace(_run(fresh, tasks, 2, params))
