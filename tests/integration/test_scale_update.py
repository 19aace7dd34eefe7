"""One optimiser step does not depend on how the mini-batch is split: micro-batches (token budget),
DDP ranks, FSDP2 shards (docs/design.md sections 5 and 6). And a non-finite loss is skipped, never applied."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

import scale_helpers as sh
from arl_testing import ROOT, compose

TOL = 1e-6


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with sh.one_thread():
        yield


@pytest.fixture(scope="module")
def episodes(tiny_path, _one_thread):
    return sh.make_episodes(compose(sh.UPDATE_OVERRIDES), n_groups=4, group_size=2)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    worst = 0.0
    for k, x in a.items():
        y = b[k]
        if x is None or y is None:
            assert x is None and y is None, k
            continue
        worst = max(worst, float((x.float() - y.float()).abs().max()))
    return worst


def _budgets(episodes, tok_pad: int = 0) -> list[int]:
    """Token budgets giving about 1, 2 and 4 micro-batches of the collated samples."""
    from arl.agent.samples import build_samples, collate_tokens

    samples, _ = build_samples(episodes, "turn")
    data = collate_tokens(samples, tok_pad)
    n, width = data["input_ids"].shape
    return [n * width * 4, math.ceil(n / 2) * width, math.ceil(n / 4) * width]


@pytest.fixture(scope="module")
def single_results(episodes):
    """One update per budget (1 process) and the micro-batch counts each produced."""
    from arl.modules import lanes

    results = []
    for budget in _budgets(episodes):
        counts = []
        original = lanes.micro_batches

        def spy(batch, idx, token_budget, _orig=original, _counts=counts):
            out = list(_orig(batch, idx, token_budget))
            _counts.append(len(out))
            return iter(out)

        lanes.micro_batches = spy
        try:
            cfg = compose(sh.UPDATE_OVERRIDES + [f"rl.micro_token_budget={budget}"])
            res = sh.run_update(cfg, episodes)
        finally:
            lanes.micro_batches = original
        res["micro_counts"] = counts  # scoring passes (old/ref) and the update pass
        res["budget"] = budget
        results.append(res)
    return results


def test_micro_batch_split_gives_the_same_step(single_results):
    base = single_results[0]
    assert base["skipped_steps"] == 0
    assert any(g is not None and g.abs().max() > 0 for g in base["grads"].values())
    update_counts = [r["micro_counts"][-1] for r in single_results]
    assert update_counts[0] == 1 and len(set(update_counts)) == 3, update_counts  # 1, ~2, ~4 micro-batches
    for other in single_results[1:]:
        grad_diff = _max_diff(base["grads"], other["grads"])
        weight_diff = _max_diff(base["weights"], other["weights"])
        print(f"budget {other['budget']} ({other['micro_counts'][-1]} micro-batches): max |grad diff| {grad_diff:.2e}, "
              f"max |weight diff| {weight_diff:.2e}")
        assert grad_diff < TOL and weight_diff < TOL
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy"):
            assert abs(base["metrics"][key] - other["metrics"][key]) < TOL, key
        assert other["metrics"]["actor/grad_norm"] == pytest.approx(base["metrics"]["actor/grad_norm"], rel=1e-5)


# the FSDP2 lane is also checked against the DDP lane end to end (test_strategies.py), so its own
# exactness run is in the slow suite
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp2", marks=pytest.mark.slow)])
def test_two_processes_match_one_on_the_union(strategy, episodes, single_results, tmp_path):
    """2 gloo processes against one process with all the groups: each rank with half of the
    groups (``even``), and one rank with all of them while the other has none (``last``): with
    ``rl.balance_tokens`` (the default) each step's rows are dealt out to both ranks by tokens, and
    without it (``last-unbalanced``) the empty rank pads every forward/backward with zero-loss
    passes. Every split gives the one-process step."""
    eps_file, out = tmp_path / "episodes.pt", tmp_path / "result.pt"
    torch.save(episodes, eps_file)
    budget = single_results[1]["budget"]  # several micro-batches per rank, too
    env = sh.subprocess_env()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scale_helpers.py"), "--episodes", str(eps_file), "--out", str(out),
         "--strategy", strategy, "--devices", "2", "--splits", "even", "last", "last-unbalanced",
         "--overrides", f"rl.micro_token_budget={budget}"],
        capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    single = single_results[0]
    for split, result in torch.load(out, weights_only=False).items():
        grad_diff = _max_diff(single["grads"], result["grads"])
        weight_diff = _max_diff(single["weights"], result["weights"])
        print(f"{strategy} x2 ({split} split) vs 1 process: max |grad diff| {grad_diff:.2e}, max |weight diff| {weight_diff:.2e}")
        assert grad_diff < TOL and weight_diff < TOL, split
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "train/samples"):
            assert abs(single["metrics"][key] - result["metrics"][key]) < TOL, (split, key, single["metrics"][key], result["metrics"][key])
        # the norm of ~1M fp32 gradients, summed in another order (per shard under FSDP2): relative
        assert result["metrics"]["actor/grad_norm"] == pytest.approx(single["metrics"]["actor/grad_norm"], rel=1e-5)
    results = torch.load(out, weights_only=False)
    dealt, unbalanced = results["last"]["metrics"], results["last-unbalanced"]["metrics"]
    # one rank held every row: twice the mean; dealt out by tokens, the heavier rank holds far less
    assert dealt["perf/rank_tokens_max_over_mean_unbalanced"] == pytest.approx(2.0)
    assert dealt["perf/rank_tokens_max_over_mean"] < 1.25
    assert results["even"]["metrics"]["perf/rank_tokens_max_over_mean"] <= results["even"]["metrics"]["perf/rank_tokens_max_over_mean_unbalanced"]
    assert "perf/rank_tokens_max_over_mean" not in unbalanced


def test_non_finite_loss_is_skipped_and_counted(episodes, caplog):
    """A NaN reward poisons one group's advantages, hence the loss: the step is skipped, the
    weights and the optimiser stay bitwise as they were, actor/skipped_steps counts it, and the
    iteration without an update is counted (train/updates_skipped) and explained in a warning."""
    import copy

    import lightning as L

    from arl.run.builders import build_rl_module, load_model
    from arl.run.settings import run_settings

    poisoned = copy.deepcopy(episodes)
    poisoned[0].turns[0].reward = float("nan")
    cfg = compose(sh.UPDATE_OVERRIDES)
    run = run_settings(cfg)
    model, tok, _ = load_model(run.model)
    module = build_rl_module(run, model, tok)
    before = {k: v.clone() for k, v in module.policy.state_dict().items()}
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    with caplog.at_level("WARNING", logger="arl.modules.rl_module"):
        trainer.fit(module, datamodule=sh.FixedRollouts(poisoned, pad_id=module.pad_id))
    assert module.skipped_steps == 1 and module.last_metrics["actor/skipped_steps"] == 1.0
    assert module.last_metrics["train/updates_skipped"] == 1.0 and module.last_metrics["train/optimizer_steps"] == 0.0
    assert any("no update" in r.message and "non-finite" in r.message for r in caplog.records)
    after = module.policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in module.policy.parameters())
    assert not trainer.optimizers[0].state  # no optimiser step was taken
    assert trainer.global_step == 0


# ---------------------------------------------------------------------- the protocol (issue 20)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_every_aggregation_gives_the_same_step_whatever_the_micro_batch_split(agg, episodes):
    """seq-mean-token-sum-norm divided by the padded width of each micro-batch (its H), so the
    step depended on rl.micro_token_budget; H is now a constant (the generation budget)."""
    budgets = _budgets(episodes)
    runs = [sh.run_update(compose(sh.UPDATE_OVERRIDES + [f"rl.micro_token_budget={b}", f"algo.loss.agg={agg}"]), episodes)
            for b in (budgets[0], budgets[2])]
    scale = max(float(g.abs().max()) for g in runs[0]["grads"].values() if g is not None)
    assert scale > 0
    assert _max_diff(runs[0]["grads"], runs[1]["grads"]) <= 1e-5 * scale
    assert runs[1]["metrics"]["actor/grad_norm"] == pytest.approx(runs[0]["metrics"]["actor/grad_norm"], rel=1e-5)
    assert runs[1]["metrics"]["actor/pg_loss"] == pytest.approx(runs[0]["metrics"]["actor/pg_loss"], rel=1e-5, abs=1e-6)


def test_the_official_mini_batch_size_makes_steps_follow_the_sample_count(episodes):
    """rl.mini_batch_size (the official ppo_mini_batch_size) fixes the samples per optimiser step:
    ceil(samples / size) steps per rollout, so a rollout with more turns makes more steps."""
    from arl.agent.samples import build_samples

    n = len(build_samples(episodes, "turn")[0])
    size = max(1, n // 3)
    res = sh.run_update(compose(sh.UPDATE_OVERRIDES + [f"rl.mini_batch_size={size}"]), episodes)
    assert res["metrics"]["actor/optimizer_steps"] == -(-n // size) >= 3
    half = [e for e in episodes if e.group_id < 2]
    n_half = len(build_samples(half, "turn")[0])
    res_half = sh.run_update(compose(sh.UPDATE_OVERRIDES + [f"rl.mini_batch_size={size}"]), half)
    assert res_half["metrics"]["actor/optimizer_steps"] == -(-n_half // size) < res["metrics"]["actor/optimizer_steps"]
    # the fixed count ignores the rollout's size
    fixed = sh.run_update(compose(sh.UPDATE_OVERRIDES + ["rl.mini_batches=2"]), episodes)
    assert fixed["metrics"]["actor/optimizer_steps"] == 2


def test_reusing_the_rollout_log_probs_gives_the_recomputed_step(episodes):
    """Off-policy steps (2 mini-batches: the second one's ratio is not 1) with pi_old taken from
    the transformers engine's own log-probs equal those with a trainer pass, to float noise
    (the engine scores left-padded batches with a KV cache)."""
    runs = {mode: sh.run_update(compose(sh.UPDATE_OVERRIDES + ["rl.mini_batches=2", f"rl.old_log_probs={mode}"]), episodes)
            for mode in ("rollout", "recompute")}
    assert runs["recompute"]["metrics"]["is/rollout_mean_abs_diff"] < 1e-4  # the two agree
    assert not any(k.startswith("is/rollout_") for k in runs["rollout"]["metrics"])
    scale = max(float(w.abs().max()) for w in runs["recompute"]["weights"].values())
    assert _max_diff(runs["rollout"]["weights"], runs["recompute"]["weights"]) <= 1e-4 * scale
    assert runs["rollout"]["metrics"]["actor/grad_norm"] == pytest.approx(runs["recompute"]["metrics"]["actor/grad_norm"], rel=1e-3)
