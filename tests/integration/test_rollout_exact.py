"""Token-exact rollouts on the real tiny model: what the trainer scores is what was sampled."""

import pytest
import torch

from arl.agent.loop import AgentLoop, LoopOptions, Task
from arl.agent.samples import collate, turn_samples
from arl.modules.forward import forward_log_probs
from arl.rollout.engine import SamplingParams
from arl.rollout.hf_engine import HFEngine


def test_left_padded_batch_equals_single_prompt_greedy(tiny):
    model, tok = tiny
    engine = HFEngine(model, tok)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("#_P_#\nup", "a much longer prompt " * 8, "x")]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    batched = engine.generate(prompts, params)
    for p, g in zip(prompts, batched):
        alone = engine.generate([p], params)[0]
        assert alone.token_ids == g.token_ids
        assert torch.allclose(torch.tensor(alone.log_probs), torch.tensor(g.log_probs), atol=1e-4)


def test_rollout_log_probs_match_trainer_forward(tiny):
    """The rollout-vs-trainer log-prob gap is numerical noise, and masks cover responses only."""
    model, tok = tiny
    torch.manual_seed(0)
    loop = AgentLoop(HFEngine(model, tok), tok, "sokoban", {}, LoopOptions(history_window=1, max_turns=3))
    episodes = loop.run([Task(0, 11), Task(1, 12)], group_size=2, params=SamplingParams(temperature=1.0, max_new_tokens=16))
    assert len(episodes) == 4 and all(1 <= ep.num_turns <= 3 for ep in episodes)
    samples = turn_samples(episodes)
    batch = collate(samples, tok.pad_token_id)
    for i, s in enumerate(samples):
        resp = batch["input_ids"][i][batch["response_mask"][i].bool()].tolist()
        assert resp == s.response_ids  # exactly the sampled ids, never re-tokenised
        assert batch["attention_mask"][i].sum() == len(s.prompt_ids) + len(s.response_ids)
    with torch.no_grad():
        logp, _ = forward_log_probs(model, batch)
    m = batch["response_mask"]
    gap = ((logp - batch["rollout_log_probs"]).abs() * m).sum() / m.sum()
    assert gap < 1e-3, gap


def test_same_seed_same_group_start_and_greedy_determinism(tiny):
    model, tok = tiny
    loop = AgentLoop(HFEngine(model, tok), tok, "sokoban", {}, LoopOptions(history_window=1, max_turns=2))
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    a = loop.run([Task(0, 5), Task(1, 6)], group_size=2, params=params)
    b = loop.run([Task(0, 5), Task(1, 6)], group_size=2, params=params)
    assert [t.response_ids for e in a for t in e.turns] == [t.response_ids for e in b for t in e.turns]
    # members of a group start from the same state (same first prompt and anchor)
    assert a[0].turns[0].prompt_ids == a[1].turns[0].prompt_ids
    assert a[0].turns[0].anchor_key == a[1].turns[0].anchor_key
    assert a[0].turns[0].prompt_ids != a[2].turns[0].prompt_ids


def test_engine_device_auto_and_explicit(tiny):
    """``auto`` is the GPU when there is one (else wherever the model is). On a CPU-only machine the
    move itself cannot be exercised: a named device the model is already on changes nothing."""
    from arl.rollout.hf_engine import resolve_device

    assert resolve_device(None) is None
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == (torch.device("cuda", 0) if torch.cuda.is_available() else None)
    model, tok = tiny
    prompt = tok("#_P_#\nup", add_special_tokens=False)["input_ids"]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    here = HFEngine(model, tok).generate([prompt], params)[0]
    named = HFEngine(model, tok, device="cpu").generate([prompt], params)[0]
    assert named.token_ids == here.token_ids and named.log_probs == here.log_probs
    assert next(model.parameters()).device == torch.device("cpu")


def test_a_long_rollout_logs_its_progress(tiny, caplog):
    """Every ``progress_every`` seconds a line says the turn, how many still play and how many won."""
    import logging

    model, tok = tiny
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    for every, expect_lines in ((0.0, True), (None, False)):
        caplog.clear()
        loop = AgentLoop(HFEngine(model, tok), tok, "sokoban", {},
                         LoopOptions(history_window=1, max_turns=3, progress_every=every))
        with caplog.at_level(logging.INFO, logger="arl.agent.loop"):
            torch.manual_seed(0)
            episodes = loop.run([Task(0, 11)], group_size=2, params=params)
        lines = [r.getMessage() for r in caplog.records if r.name == "arl.agent.loop" and r.getMessage().startswith("rollout:")]
        assert bool(lines) == expect_lines
        if expect_lines:
            playing = sum(1 for ep in episodes if ep.num_turns > 1)
            assert lines[0].startswith(f"rollout: turn 1/3 | {playing} of 2 episodes still playing, 0 won | ")


def test_per_prompt_token_counts(tiny):
    """Sampling parameters one per prompt that differ in their token counts: each row is cut at its
    own max_new_tokens (a prefix of the row decoded to the largest); any other difference is refused."""
    model, tok = tiny
    engine = HFEngine(model, tok)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("#_P_#\nup", "Push the box.", "x")]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=9, stop=())
    full = engine.generate(prompts, greedy)
    each = [SamplingParams(temperature=0.0, max_new_tokens=n, stop=()) for n in (3, 9, 5)]
    cut = engine.generate(prompts, each)
    assert [g.token_ids for g in cut] == [f.token_ids[:n] for f, n in zip(full, (3, 9, 5))]
    assert [g.finish_reason for g in cut] == ["length"] * 3
    with pytest.raises(ValueError, match="may differ only in max_new_tokens"):
        engine.generate(prompts, [greedy, greedy, SamplingParams(temperature=1.0, max_new_tokens=9, stop=())])
