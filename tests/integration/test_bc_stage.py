"""experiment=bc_<env>: expert data + self-bootstrapping -> dataset file -> SFT -> the RL start.

Real components throughout: the Sokoban env and its solver, the tiny model and tokenizer, the HF
engine, Lightning Trainers. Budgets are cut so the three runs take well under a minute each.
"""

import json

import pytest
import torch

from arl.bc import load_episodes, read_header
from arl_testing import compose

SMALL = ["debug=cpu_small", "bc.episodes=80", "bc.epochs=1", "rollout.val_episodes=8", "rollout.max_new_tokens=16"]


@pytest.fixture(scope="module")
def bc_run(tmp_path_factory):
    from arl.run.pipeline import train

    out = tmp_path_factory.mktemp("bc")
    # a near-greedy bootstrap with no return threshold keeps every fully valid episode, so the
    # self-sampled part of the dataset is not empty even for a weakly cloned policy
    cfg = compose(["experiment=bc_sokoban", *SMALL, "bc.bootstrap.episodes=16", "bc.bootstrap.temperature=0.05",
                   "bc.bootstrap.min_return=-100"], output_dir=str(out))
    return out, train(cfg)


def test_bc_stage_writes_dataset_policy_and_results(bc_run, tiny):
    out, results = bc_run
    _, tok = tiny
    assert "val_after_rl" not in results and "iterations_done" not in results  # rl.enabled=false
    header = read_header(out / "bc_dataset.jsonl")
    assert header["env"] == "sokoban" and header["sample_mode"] == "turn"
    assert header["sources"]["expert"] == 80 and header["sources"]["self"] == results["bc/bootstrap_kept"] > 0
    items = load_episodes(out / "bc_dataset.jsonl", tok, "turn", "sokoban")
    for item in items:
        if item.source == "self":  # the engine's sampled ids, every turn valid
            assert all(t.valid and len(t.response_ids) == len(t.rollout_log_probs) for t in item.episode.turns)
    assert (out / "bc_policy_hf" / "config.json").exists()
    saved = json.loads((out / "bc_results.json").read_text())
    assert saved["bc/val_success_untrained"] == 0.0  # the untrained tiny model never solves a level
    assert saved["val_after_bc"]["val/valid_action_ratio"] > 0.5
    assert saved["optimized_metric"] == saved["val_after_bc"]["val/success_rate"]
    # the validation's episodes, turn by turn, as an eval run writes them
    rows = [json.loads(line) for line in (out / "val_episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["turn_log"] for r in rows)
    assert sum(r["won"] for r in rows) / 8 == pytest.approx(saved["val_after_bc"]["val/success_rate"])
    assert (out / "tensorboard" / "bc").is_dir()
    # the held-out episodes' loss and greedy agreement of the final policy
    assert saved["bc/val_loss"] > 0 and 0 <= saved["bc/val_exact_match"] <= 1
    assert 0 < saved["bc/val_token_accuracy"] <= 1  # the format tags alone are learnt in one epoch


def test_rl_from_the_bc_policy_starts_where_bc_ended(bc_run, tmp_path):
    """model.init_from skips BC; the validation before RL replays the BC run's validation (the same
    seeds sample the same episodes; torchmetrics sums in float32)."""
    from arl.run.pipeline import train

    out, results = bc_run
    cfg = compose(["experiment=sokoban", "algo=grpo", *SMALL, f"model.init_from={out / 'bc_policy_hf'}", "rl.iterations=1",
                   "rl.val_every=1", "rollout.tasks_per_iteration=2", "rollout.group_size=2"], output_dir=str(tmp_path))
    rl = train(cfg)
    assert not any(k.startswith("bc/") for k in rl)
    assert rl["val_before_rl"]["val/success_rate"] == results["val_after_bc"]["val/success_rate"]
    assert rl["val_before_rl"]["val/valid_action_ratio"] == pytest.approx(results["val_after_bc"]["val/valid_action_ratio"], rel=1e-6)
    assert rl["iterations_done"] == 1


def test_bc_from_a_saved_dataset_trains_on_its_episodes(bc_run, tmp_path):
    from arl.run.pipeline import train

    out, results = bc_run
    cfg = compose(["experiment=bc_sokoban", *SMALL, f"bc.dataset_path={out / 'bc_dataset.jsonl'}",
                   "bc.val_untrained=false"], output_dir=str(tmp_path))
    again = train(cfg)
    assert again["bc/dataset_episodes"] == again["bc/episodes"] == results["bc/episodes"]
    assert "bc/bootstrap_sampled" not in again  # a given dataset is used as it is
    assert read_header(tmp_path / "bc_dataset.jsonl")["sources"] == read_header(out / "bc_dataset.jsonl")["sources"]


def test_a_run_stopped_during_sft_keeps_its_expert_data(tmp_path, monkeypatch, tiny):
    """The dataset is written before each SFT round, so a run stopped in a long round (here the
    round raises, as a kill would stop it) leaves the collected episodes to continue from."""
    import arl.run.bc_stage
    from arl.run.pipeline import train

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("stopped during SFT")

    monkeypatch.setattr(arl.run.bc_stage, "_fit_bc_round", stopped)
    cfg = compose(["experiment=bc_sokoban", *SMALL, "bc.episodes=12", "bc.val_untrained=false"], output_dir=str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    assert read_header(tmp_path / "bc_dataset.jsonl")["sources"] == {"expert": 12, "self": 0, "dagger": 0}
    assert len(load_episodes(tmp_path / "bc_dataset.jsonl", tiny[1], "turn", "sokoban")) == 12
    assert not (tmp_path / "bc_policy_hf").exists()


def test_the_cloned_policy_is_saved_before_the_engine_takes_it(tmp_path, monkeypatch):
    """An engine that fails when the cloned weights are loaded into it (a vLLM that runs out of
    memory waking up) loses no SFT: bc_policy_hf is written before the sync, and it holds the
    trained weights, not the untrained ones."""
    from arl.models.loading import load_policy
    from arl.rollout.hf_engine import HFEngine
    from arl.run.pipeline import train

    def out_of_memory(self, policy):
        raise RuntimeError("CUDA out of memory while waking the engine")

    monkeypatch.setattr(HFEngine, "sync", out_of_memory)
    cfg = compose(["experiment=bc_sokoban", *SMALL, "bc.episodes=12", "bc.val_untrained=false",
                   "bc.bootstrap.enabled=false"], output_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="out of memory"):
        train(cfg)
    saved, _ = load_policy(tmp_path / "bc_policy_hf")
    untrained, _ = load_policy(_tiny_folder())
    assert any(not torch.equal(a, b) for a, b in zip(saved.state_dict().values(), untrained.state_dict().values()))


def _tiny_folder():
    from arl.run.builders import tiny_model

    return tiny_model()


def test_a_dataset_of_another_env_is_refused_before_training(bc_run, tmp_path):
    from arl.run.pipeline import train

    out, _ = bc_run
    cfg = compose(["experiment=bc_math_tool", *SMALL, f"bc.dataset_path={out / 'bc_dataset.jsonl'}",
                   "bc.val_untrained=false"], output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="'sokoban' episodes, the run plays 'math_tool'"):
        train(cfg)


def test_bc_in_trajectory_mode_keeps_one_stream_per_episode(tmp_path, tiny):
    """Trajectory samples: the dataset records the mode, and its turns are continuations of one stream."""
    from arl.run.pipeline import train

    _, tok = tiny
    cfg = compose(["experiment=bc_sokoban", *SMALL, "rollout.sample_mode=trajectory", "bc.val_untrained=false",
                   "bc.bootstrap.enabled=false", "bc.val_every=2"], output_dir=str(tmp_path))
    results = train(cfg)
    # held-out metrics every 2 batches, and once more for the final policy when 2 does not divide the epoch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = -(-int(results["bc/samples"]) // int(cfg.bc.batch_size))
    events = EventAccumulator(str(tmp_path / "tensorboard" / "bc"))
    events.Reload()
    assert len(events.Scalars("bc/val_exact_match")) == steps // 2 + steps % 2 >= 2
    assert read_header(tmp_path / "bc_dataset.jsonl")["sample_mode"] == "trajectory"
    items = load_episodes(tmp_path / "bc_dataset.jsonl", tok, "trajectory", "sokoban")
    assert len(items) == results["bc/episodes"] == 80
    ep = next(i.episode for i in items if len(i.episode.turns) > 1)
    # one token stream: each turn's context is the previous context, its answer, then the new observation
    first, second = ep.turns[0], ep.turns[1]
    stream = first.prompt_ids + first.response_ids
    assert second.prompt_ids[: len(stream)] == stream and len(second.prompt_ids) > len(stream)
    with pytest.raises(ValueError, match="sample mode is 'trajectory'"):
        load_episodes(tmp_path / "bc_dataset.jsonl", tok, "turn", "sokoban")


def test_dagger_labels_every_state_the_cloned_policy_reached(bc_run, tiny):
    """The teacher answers the very state each prompt showed: replaying the policy's own actions in a
    fresh env reproduces every label; relabelling keeps the prompts and puts the expert's ids under them."""
    import torch
    from omegaconf import OmegaConf

    from arl.agent.experts import expert_path
    from arl.agent.loop import Task
    from arl.bc import relabel
    from arl.envs.registry import make_env
    from arl.envs.sokoban.expert import expert_response
    from arl.models.loading import load_policy
    from arl.rollout.engine import SamplingParams
    from arl.rollout.hf_engine import HFEngine
    from arl.run.builders import build_agent_loop
    from arl.run.settings import run_settings

    out, _ = bc_run
    model, tok = load_policy(out / "bc_policy_hf")
    c = OmegaConf.to_container(compose(["experiment=bc_sokoban", *SMALL]), resolve=True)
    run = run_settings(c)
    loop = build_agent_loop(run.env, run.rollout, HFEngine(model, tok), tok)
    torch.manual_seed(3)
    episodes = loop.run([Task(i, 5000 + i) for i in range(6)], 1, SamplingParams(temperature=0.3, max_new_tokens=16),
                        teacher=expert_path("sokoban"))
    moved = labels = 0
    for ep in episodes:
        env = make_env("sokoban", **c["env"]["kwargs"])
        env.reset(ep.seed)
        for turn in ep.turns:
            try:
                want = expert_response(env)
            except RuntimeError:  # a box pushed into a dead end: the solver has no plan, no label
                want = None
            assert turn.expert_text == want
            labels += want is not None
            before = env.level.to_text()
            env.step(turn.action if turn.valid else loop.spec.invalid_action)
            moved += env.level.to_text() != before
        episode, agreed = relabel(ep, tok)
        kept = [t for t in ep.turns if t.expert_text is not None]
        assert [t.prompt_ids for t in episode.turns] == [t.prompt_ids for t in kept]
        for new, old in zip(episode.turns, kept):
            assert new.response_ids == tok(old.expert_text, add_special_tokens=False)["input_ids"]
            assert new.response_text == old.expert_text and new.valid and new.rollout_log_probs == [0.0] * len(new.response_ids)
        assert agreed == sum(t.valid and t.action == n.action for t, n in zip(kept, episode.turns))
    assert moved >= 3 and labels >= 6  # the cloned policy moves, so the labelled states differ
    loop.close()


@pytest.mark.long  # over half a minute of a worker: make test-long, run by CI after make test
def test_dagger_rounds_join_the_dataset_and_retrain(bc_run, tmp_path, tiny):
    """Continue a BC run with DAgger: bc.epochs=0 trains nothing before the rounds; each round's
    labelled episodes join the data (source "dagger"), and the next fit trains on all of it."""
    from arl.run.pipeline import train

    out, results = bc_run
    _, tok = tiny
    cfg = compose(["experiment=bc_sokoban", *SMALL, f"model.path={out / 'bc_policy_hf'}",
                   f"bc.dataset_path={out / 'bc_dataset.jsonl'}", "bc.epochs=0", "bc.val_untrained=false",
                   "bc.dagger.enabled=true", "bc.dagger.rounds=2", "bc.dagger.episodes=6"], output_dir=str(tmp_path))
    again = train(cfg)
    header = read_header(tmp_path / "bc_dataset.jsonl")
    before = read_header(out / "bc_dataset.jsonl")["sources"]
    assert header["sources"]["expert"] == before["expert"] and header["sources"]["self"] == before["self"]
    # each episode's first state is a solvable start, so every played episode has a labelled turn
    assert header["sources"]["dagger"] == 2 * 6 and again["bc/episodes"] == header["episodes"]
    items = load_episodes(tmp_path / "bc_dataset.jsonl", tok, "turn", "sokoban")
    dagger_turns = sum(len(i.episode.turns) for i in items if i.source == "dagger")
    assert 6 <= again["bc/dagger_turns"] < dagger_turns  # the last round's count, out of both rounds'
    assert 0 <= again["bc/dagger_agreement"] <= 1 and 0 <= again["bc/dagger_success"] <= 1
    # the last fit trained on the earlier samples and the labelled turns (less the held-out episodes)
    assert results["bc/samples"] < again["bc/samples"] < sum(len(i.episode.turns) for i in items)


def test_zero_bc_epochs_keep_the_given_policy(bc_run, tmp_path):
    """bc.epochs=0 without later rounds: the saved policy is the given one, weight for weight."""
    from safetensors.torch import load_file

    from arl.run.pipeline import train

    out, _ = bc_run
    cfg = compose(["experiment=bc_sokoban", *SMALL, f"model.path={out / 'bc_policy_hf'}",
                   f"bc.dataset_path={out / 'bc_dataset.jsonl'}", "bc.epochs=0", "bc.val_untrained=false",
                   "rollout.val_episodes=2"], output_dir=str(tmp_path))
    train(cfg)
    given, saved = load_file(out / "bc_policy_hf" / "model.safetensors"), load_file(tmp_path / "bc_policy_hf" / "model.safetensors")
    assert given.keys() == saved.keys() and all((given[k] == saved[k]).all() for k in given)
