"""Validation episodes outside training: ``src/eval.py`` and the tests use this."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from arl.agent.metrics import episode_metrics
from arl.datamodules.rollout_datamodule import validation_batches
from arl.utils.logging import console, results_table


def load_checkpoint_policy(ckpt_path: Path, model_cfg: dict[str, Any]):
    """(model, tokenizer) with the policy weights of a Lightning checkpoint of the RL stage."""
    from arl.models.loading import load_from_config

    model, tokenizer, _ = load_from_config({**model_cfg, "init_from": None})
    state = torch.load(ckpt_path, map_location="cpu", weights_only=False)["state_dict"]
    policy = {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}
    missing, unexpected = model.load_state_dict(policy, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied embeddings
    if real_missing or unexpected:
        raise ValueError(f"checkpoint does not match the model: missing {real_missing[:5]}, unexpected {unexpected[:5]}")
    return model, tokenizer


def run_validation(loop, rollout: dict[str, Any]) -> dict[str, float]:
    """Greedy (``val_temperature``) episodes on the held-out seeds, group size 1."""
    from arl.pipeline import sampling_params

    params = sampling_params(rollout, validation=True)
    batches = validation_batches(loop, params, int(rollout["val_episodes"]), int(rollout["val_batch_size"]))
    return episode_metrics([e for b in batches for e in b.episodes], "val/")


def run_config_file(ckpt: Path) -> Path | None:
    """The ``.hydra/config.yaml`` of the run that wrote ``ckpt`` (a checkpoint or HF folder)."""
    run_dir = ckpt.parent.parent if ckpt.is_file() else ckpt.parent
    path = run_dir / ".hydra" / "config.yaml"
    return path if path.exists() else None


def _cli_overrides():
    """The command-line overrides of this eval run (they win over the run's config)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        overrides = HydraConfig.get().overrides.task
    except ValueError:  # not under @hydra.main (tests)
        return OmegaConf.create()
    keep = [o for o in overrides if o.split("=")[0].split(".")[0] in ("env", "model")]
    return OmegaConf.from_dotlist(keep)


def evaluate_from_config(cfg: DictConfig) -> dict[str, float]:
    from arl.models.loading import load_policy
    from arl.pipeline import build_agent_loop, build_engine

    ckpt = Path(str(cfg.ckpt_path)).expanduser()
    if not ckpt.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt} does not exist")
    c = OmegaConf.to_container(cfg, resolve=True)
    run_cfg_file = run_config_file(ckpt)
    if cfg.use_run_config and run_cfg_file is not None:
        run_cfg = OmegaConf.to_container(OmegaConf.load(run_cfg_file), resolve=False)
        for key in ("model", "env"):
            c[key] = run_cfg[key]
        c = OmegaConf.to_container(OmegaConf.merge(c, _cli_overrides()), resolve=True)
    L.seed_everything(int(c["seed"]))
    if ckpt.is_dir():
        model, tokenizer = load_policy(ckpt, c["model"].get("dtype", "float32"))
    else:
        model, tokenizer = load_checkpoint_policy(ckpt, c["model"])
    model.eval()
    loop = build_agent_loop(c, build_engine(c["rollout"], model, tokenizer), tokenizer)
    metrics = run_validation(loop, c["rollout"])
    loop.close()
    rows = [(k, f"{v:.3f}") for k, v in metrics.items()]
    rows.insert(0, ("policy", str(ckpt)))
    rows.insert(1, ("episodes", str(c["rollout"]["val_episodes"])))
    console.print(results_table(f"validation on {c['env']['name']}", rows))
    return metrics
