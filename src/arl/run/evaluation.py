"""Validation episodes outside training: ``src/eval.py`` and the tests use this."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from arl.agent.metrics import episode_metrics, member_means
from arl.agent.mix import MIX_NAME
from arl.agent.records import episode_record
from arl.datamodules.batches import with_protocol_names
from arl.datamodules.rollout_datamodule import validation_episodes, validation_protocol, validation_sets
from arl.models.config import ModelSettings
from arl.models.loading import load_policy
from arl.run.builders import build_agent_loop, build_engine, load_model, sampling_params, validation_plan
from arl.run.settings import RolloutSettings, eval_settings, rollout_settings
from arl.utils.logging import console, results_table


def load_checkpoint_policy(ckpt_path: Path, model: ModelSettings):
    """(model, tokenizer) of the ``model`` section with the policy weights of a Lightning checkpoint
    of the RL stage."""
    model, tokenizer, _ = load_model(dataclasses.replace(model, init_from=None))
    state = torch.load(ckpt_path, map_location="cpu", weights_only=False)["state_dict"]
    policy = {k[len("policy.") :]: v for k, v in state.items() if k.startswith("policy.")}
    missing, unexpected = model.load_state_dict(policy, strict=False)
    real_missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied embeddings
    if real_missing or unexpected:
        raise ValueError(f"checkpoint does not match the model: missing {real_missing[:5]}, unexpected {unexpected[:5]}")
    return model, tokenizer


def run_validation(
    loop, rollout: Mapping[str, Any] | RolloutSettings, episodes_path: Path | None = None, seed: int = 0
) -> dict[str, float]:
    """Episodes on the held-out seeds, group size 1, sampled with the ``val_*`` keys (greedy when
    ``val_temperature`` is 0); ``val/*`` metrics and their ``val_sampled/*`` or ``val_greedy/*``
    copy. With ``episodes_path``, each episode is also written there as a JSON line
    (:func:`arl.agent.records.episode_record`: the summary and the turns, text and all). A mix (``env=mix``)
    validates every member on its own held-out set: ``val/<member>/*``, and the overall ``val/success_rate``,
    ``return_mean``, ``valid_action_ratio`` (and ``score``) the mean over the members, as training logs them."""
    plan = validation_plan(rollout_settings(rollout))
    episodes, metrics, members = [], {}, []
    for member, member_loop, member_plan in validation_sets(loop, plan):
        played = [e for eps, _ in validation_episodes(member_loop, member_plan, seed=seed) for e in eps]
        episodes += played
        if member:
            members.append(member)
            metrics.update(episode_metrics(played, f"val/{member}/", graded=member_loop.spec.graded, failed_lose=True))
            metrics[f"val/{member}/episodes"] = float(len(played))
    if episodes_path is not None:
        episodes_path.parent.mkdir(parents=True, exist_ok=True)
        with episodes_path.open("w") as f:
            f.writelines(json.dumps(episode_record(e)) + "\n" for e in episodes)
    metrics = {**episode_metrics(episodes, "val/", graded=loop.spec.graded, failed_lose=True), **metrics}
    metrics.update(member_means(metrics, members))
    return with_protocol_names(metrics, validation_protocol(plan.sampling))


def run_config_file(ckpt: Path) -> Path | None:
    """The ``.hydra/config.yaml`` of the run that wrote ``ckpt`` (a checkpoint or HF folder)."""
    run_dir = ckpt.parent.parent if ckpt.is_file() else ckpt.parent
    path = run_dir / ".hydra" / "config.yaml"
    return path if path.exists() else None


RUN_SECTIONS = ("model", "env")  # taken whole from the run that wrote the checkpoint
RUN_ROLLOUT_KEYS = ("max_new_tokens", "max_prompt_tokens", "sample_mode", "stop")  # how its episodes were played


def _is_run_key(dotted: str) -> bool:
    parts = dotted.lstrip("+").split(".")
    return parts[0] in RUN_SECTIONS or (parts[0] == "rollout" and len(parts) > 1 and parts[1] in RUN_ROLLOUT_KEYS)


def _cli_overrides() -> list[str]:
    """The command-line overrides of this eval run (``key=value``)."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # not under @hydra.main (tests)
        return []


def with_run_config(c: dict[str, Any], run_cfg: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``c`` (the resolved eval config) with the settings of the run that wrote the checkpoint: its
    ``model`` and ``env`` sections and the rollout keys that shape an episode (answer length,
    prompt budget, sample mode, stop strings), so a policy is validated as its run validated it
    (a 128-token ALFWorld answer cut at the eval default of 32 would be an invalid action). Those
    keys given on the command line (``overrides``) still win. A plain key added to a section since
    that run (``model.logit_chunk_tokens``) takes this config's value."""
    out = dict(c)
    for key in RUN_SECTIONS:
        added = {k: v for k, v in c[key].items() if k not in run_cfg[key] and not isinstance(v, Mapping)}
        if key == "env" and run_cfg[key].get("name") == MIX_NAME:  # a mix's section has keys of its own
            added = {}
        out[key] = {**added, **run_cfg[key]}
    out["rollout"] = {**c["rollout"], **{k: run_cfg["rollout"][k] for k in RUN_ROLLOUT_KEYS if k in run_cfg.get("rollout", {})}}
    mine = OmegaConf.create()
    for key, value in _run_key_overrides(overrides):
        OmegaConf.update(mine, key, value, force_add=True)
    return OmegaConf.to_container(OmegaConf.merge(out, mine), resolve=True)


def _run_key_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """``(key, value)`` of the overrides that set a run key, parsed as Hydra parses them
    (``env.kwargs.num_games={valid_seen:512}`` is a dict, as on the command line). A group choice
    (``env=alfworld``) is not a value: the run's own section stays."""
    wanted = [o for o in overrides if "=" in o and _is_run_key(o.split("=", 1)[0])]
    parsed = OverridesParser.create().parse_overrides(wanted) if wanted else []
    return [(o.key_or_group, o.value()) for o in parsed if "." in o.key_or_group and not o.is_delete()]


def evaluate_from_config(cfg: DictConfig) -> dict[str, float]:
    ckpt = Path(str(cfg.ckpt_path)).expanduser()
    if not ckpt.exists():
        raise FileNotFoundError(f"ckpt_path={ckpt} does not exist")
    c = OmegaConf.to_container(cfg, resolve=True)
    run_cfg_file = run_config_file(ckpt)
    if cfg.use_run_config and run_cfg_file is not None:
        run_cfg = OmegaConf.to_container(OmegaConf.load(run_cfg_file), resolve=False)
        c = with_run_config(c, run_cfg, _cli_overrides())
    ev = eval_settings(c)  # the config checked and typed, once
    L.seed_everything(ev.seed)
    if ckpt.is_dir():
        model, tokenizer = load_policy(ckpt, ev.model.dtype)
    else:
        model, tokenizer = load_checkpoint_policy(ckpt, ev.model)
    model.eval()
    rollout = ev.rollout
    loop = build_agent_loop(ev.env, rollout, build_engine(rollout, model, tokenizer), tokenizer)
    episodes_path = Path(ev.paths.output_dir) / "val_episodes.jsonl" if ev.save_episodes else None
    metrics = run_validation(loop, rollout, episodes_path, seed=ev.seed)
    loop.close()
    rows = [(k, f"{v:.3f}") for k, v in metrics.items() if k.startswith("val/")]
    rows.insert(0, ("policy", str(ckpt)))
    rows.insert(1, ("episodes", str(rollout.val_episodes)))
    rows.insert(2, ("sampling", sampling_params(rollout, validation=True).describe()))
    if episodes_path is not None:
        rows.insert(3, ("episodes, turn by turn", str(episodes_path)))
    console.print(results_table(f"validation on {ev.env.name}", rows))
    return metrics
