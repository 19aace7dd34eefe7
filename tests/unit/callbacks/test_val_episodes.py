"""The validation-episodes callback's files: one per validation, dropped after a resume when the
continuing run has not reached their iteration."""

from types import SimpleNamespace

import torch

from arl.callbacks.val_episodes import ValidationEpisodes, validation_records
from arl.datamodules.batches import ValidationBatch
from arl.utils.episode_files import iteration_of


def test_records_name_each_episode_by_its_task_seed_and_type():
    batch = ValidationBatch({"won": torch.tensor([True, False]), "ret": torch.tensor([10.0, -0.5]),
                             "turns": torch.tensor([7, 50]), "valid_turns": torch.tensor([7, 31])},
                            iteration=3, task_types=("heat", "look"), seeds=(1000, 1001))
    assert validation_records(batch) == [
        {"seed": 1000, "task_type": "heat", "won": True, "return": 10.0, "turns": 7, "valid_turns": 7},
        {"seed": 1001, "task_type": "look", "won": False, "return": -0.5, "turns": 50, "valid_turns": 31},
    ]


def test_iteration_of_reads_only_the_callbacks_names(tmp_path):
    assert iteration_of(tmp_path / "iter0.jsonl") == 0 and iteration_of(tmp_path / "iter15.jsonl") == 15
    assert iteration_of(tmp_path / "iter_old.jsonl") is None and iteration_of(tmp_path / "iter3.jsonl.tmp") is None


def test_a_validation_writes_its_file_and_a_resume_drops_the_later_ones(tmp_path):
    cb = ValidationEpisodes(tmp_path / "val_episodes")
    trainer = SimpleNamespace(is_global_zero=True, sanity_checking=False)
    module = SimpleNamespace(iteration=0)
    batch = ValidationBatch({"won": torch.tensor([False, True]), "ret": torch.tensor([0.0, 1.0]),
                             "turns": torch.tensor([5, 3]), "valid_turns": torch.tensor([5, 3])},
                            iteration=0, task_types=("a", "b"), seeds=(7, 5))
    for k in (0, 10, 20):
        module.iteration = k
        cb.on_validation_epoch_start(trainer, module)
        cb.on_validation_batch_end(trainer, module, None, batch, 0)
        cb.on_validation_epoch_end(trainer, module)
    files = sorted(p.name for p in (tmp_path / "val_episodes").iterdir())
    assert files == ["iter0.jsonl", "iter10.jsonl", "iter20.jsonl"]  # no .tmp left behind
    lines = (tmp_path / "val_episodes" / "iter10.jsonl").read_text().splitlines()
    assert [line.split(",")[0] for line in lines] == ['{"seed": 5', '{"seed": 7']  # sorted by task seed
    module.iteration = 12  # resumed from the checkpoint of iteration 12: iteration 20's validation is not this run's
    cb.on_train_start(trainer, module)
    assert sorted(p.name for p in (tmp_path / "val_episodes").iterdir()) == ["iter0.jsonl", "iter10.jsonl"]


def test_a_batch_with_records_writes_them_turns_and_all():
    from arl.agent.records import Episode, Turn, episode_record

    ep = Episode(group_id=0, episode_id=5, seed=1000, env_name="sokoban", task_type="sokoban", won=True, score=1.0)
    ep.turns = [Turn([1], [2, 3], [-0.5, -0.25], "<action>up</action>", "up", True, "", -0.1, False, -1, observation="#P#"),
                Turn([1], [4], [-0.1], "??", "", False, "no action", 10.0, True, 3, truncated=True, observation="#_P")]
    record = episode_record(ep)
    assert record == {
        "seed": 1000, "env": "sokoban", "task_type": "sokoban", "won": True, "return": 9.9, "turns": 2, "valid_turns": 1, "episode_id": 5,
        "score": 1.0, "env_error": False,
        "turn_log": [
            {"observation": "#P#", "response": "<action>up</action>", "action": "up", "valid": True, "reason": "",
             "reward": -0.1, "truncated": False, "anchor": "ffffffffffffffff"},
            {"observation": "#_P", "response": "??", "action": "", "valid": False, "reason": "no action",
             "reward": 10.0, "truncated": True, "anchor": "0000000000000003"},
        ],
    }
    batch = ValidationBatch({"won": torch.tensor([True]), "ret": torch.tensor([9.9]), "turns": torch.tensor([2]),
                             "valid_turns": torch.tensor([1])}, iteration=0, task_types=("sokoban",), seeds=(1000,),
                            records=(record,))
    assert validation_records(batch) == [record]


def test_text_samples_are_a_won_and_a_lost_episode_per_type_drawn_by_seed():
    from arl.callbacks.val_episodes import episode_markdown, sample_episodes

    rows = [{"seed": s, "task_type": t, "won": w, "return": float(w), "turns": 1, "valid_turns": 1}
            for s, t, w in [(1, "a", True), (2, "a", True), (3, "a", False), (4, "b", False), (5, "b", False)]]
    picks = sample_episodes(rows, seed=7, iteration=3)
    assert [tag for tag, _ in picks] == ["a/won", "a/lost", "b/lost"]  # b has no won episode
    assert all(row["task_type"] == tag.split("/")[0] and row["won"] == (tag.endswith("won")) for tag, row in picks)
    assert picks == sample_episodes(rows, seed=7, iteration=3)  # the same draw for the same seed and iteration
    drawn = {sample_episodes(rows, seed=s, iteration=0)[0][1]["seed"] for s in range(20)}
    assert drawn == {1, 2}  # by seed, not always the first
    text = episode_markdown(rows[0])
    assert text.startswith("**won**, task seed 1, a: return +1.00, 1 turns, 1 valid") and "summary only" in text
