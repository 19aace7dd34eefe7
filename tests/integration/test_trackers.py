"""The trackers of the ``logger`` group: a real BC + RL run writes TensorBoard, CSV and MLflow (and
W&B offline) records, and the same metric holds the same value at the same step in each store,
read back from the files each tracker wrote."""

import csv
import importlib.util
import os
import time

import pytest
import yaml

from arl.run.settings import run_settings
from arl_testing import compose

pytest.importorskip("mlflow")
pytest.importorskip("wandb")

SMOKE = ["debug=smoke", "rl.iterations=2", "rl.val_every=1", "rollout.val_episodes=2", "rollout.max_new_tokens=8",
         "algo.filter.name=none"]


def _csv_series(path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key != "step" and value not in ("", None):
                    out.setdefault(key, {})[int(row["step"])] = float(value)
    return out


def _mlflow_series(uri: str, run_name: str) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])
            if r.info.run_name == run_name]
    assert len(runs) == 1, [r.info.run_name for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    run = runs[0]
    series = {key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in run.data.metrics}
    return series, run.data.params


@pytest.fixture(scope="module")
def many_run(tmp_path_factory):
    from arl.run.pipeline import train

    out = tmp_path_factory.mktemp("many")
    cfg = compose(["logger=many", *SMOKE], output_dir=str(out))
    train(cfg)
    return out, cfg


def test_logger_many_writes_the_same_values_to_tensorboard_csv_and_mlflow(many_run):
    from scale_helpers import tb_scalars

    out, cfg = many_run
    for stage, keys in (("rl", ("val/success_rate", "actor/pg_loss")), ("bc", ("bc/loss",))):
        tb = {tag: dict(values) for tag, values in tb_scalars(out / "tensorboard" / stage).items()}
        table = _csv_series(out / "csv" / stage / "metrics.csv")
        flow, params = _mlflow_series(f"file:{out / 'mlruns'}", f"{cfg.task_name}-{stage}")
        for key in keys:
            assert tb[key], key
            assert set(table[key]) == set(flow[key]) == set(tb[key]), key  # the same steps
            for step, value in tb[key].items():  # TensorBoard stores float32
                assert table[key][step] == pytest.approx(value, rel=1e-6, abs=1e-7)
                assert flow[key][step] == pytest.approx(value, rel=1e-6, abs=1e-7)
        # every tag TensorBoard got, the other two got too
        assert set(tb) <= set(table) and set(tb) <= set(flow)
        # the resolved config, once per stage, in each store that keeps hyperparameters
        assert params["algo.name"] == cfg.algo.name and params["seed"] == str(cfg.seed)
        hparams = yaml.safe_load((out / "csv" / stage / "hparams.yaml").read_text())
        assert hparams["rl.iterations"] == 2 and hparams["algo.name"] == cfg.algo.name
        assert (out / "tensorboard" / stage / "hparams.yaml").exists()
    assert tb_scalars(out / "tensorboard" / "rl")["val/success_rate"][0][0] == 0  # the start is step 0 everywhere


def test_logger_wandb_runs_offline_one_run_per_stage(tmp_path, monkeypatch):
    from arl.run.pipeline import train

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = compose(["logger=[tensorboard,wandb]", *SMOKE], output_dir=str(tmp_path))
    train(cfg)
    import wandb

    assert wandb.run is None  # each stage closed its run
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # BC's and RL's, nothing synced anywhere
    # W&B's service process writes the records; on a loaded machine the last ones reached the file
    # a moment after finish() returned (once in a full parallel suite), so the test gives it 30 s
    deadline = time.monotonic() + 30
    while True:
        records = [next(run.glob("run-*.wandb")).read_bytes() for run in runs]
        bc = [r for r in records if f"{cfg.task_name}-bc".encode() in r]
        rl = [r for r in records if f"{cfg.task_name}-rl".encode() in r]
        if (len(bc) == len(rl) == 1 and b"bc/loss" in bc[0] and b"actor/pg_loss" in rl[0]) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(bc) == len(rl) == 1 and b"bc/loss" in bc[0] and b"actor/pg_loss" not in bc[0]
    assert b"val/success_rate" in rl[0] and b"actor/pg_loss" in rl[0]


def test_a_resumed_csv_curve_has_no_repeated_step(tmp_path):
    from arl.run.loggers import purge_csv_rows

    path = tmp_path / "metrics.csv"
    path.write_text("a,epoch,step\n1.0,0,0\n,0,1\n2.0,0,1\n3.0,0,2\n4.0,0,3\n")
    purge_csv_rows(str(path), 2)  # resumed from the checkpoint of iteration 1: steps 2 and on are logged again
    assert path.read_text().splitlines() == ["a,epoch,step", "1.0,0,0", ",0,1", "2.0,0,1"]
    purge_csv_rows(str(tmp_path / "absent.csv"), 2)  # nothing there: nothing to do


def test_a_tracker_without_its_package_stops_at_start_up_naming_the_extra(monkeypatch):
    from arl.run.checks import check_machine
    from arl.utils.config import ConfigError

    cfg = compose(["logger=many", "debug=smoke"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"logger.mlflow \(MLFlowLogger\) needs the mlflow package.*\.\[trackers\]"):
        check_machine(run_settings(cfg))


def test_every_logger_config_composes_and_names_its_stores():
    for choice, loggers in (("tensorboard", {"tensorboard"}), ("csv", {"csv"}), ("wandb", {"wandb"}),
                            ("mlflow", {"mlflow"}), ("many", {"tensorboard", "csv", "mlflow"})):
        cfg = compose([f"logger={choice}"])
        assert set(cfg.logger) == loggers, choice
    cfg = compose(["logger=wandb"])
    assert cfg.logger.wandb.offline is None and os.environ.get("WANDB_MODE") != "online"
