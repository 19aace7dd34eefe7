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
