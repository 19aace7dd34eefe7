"""The memory plan of a composed training config: will the run fit, before anything is built.

:func:`plan_config` reads the model's architecture (:func:`resolve_architecture`: the embedded
tiny model's config, a local ``config.json``, the HF cache, or the table of known hub ids) and
how the config places it (:func:`setup_from_config`: strategy, shards, precision, checkpointing,
LoRA, reference, token budget, rollout engine), and hands both to the arithmetic of
:mod:`arl.plan.memory`. ``src/plan.py`` prints the result; ``src/train.py`` runs
:func:`startup_check` after its machine check and stops a GPU run whose plan does not fit.
No model, engine or tensor is made here.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from arl.distributed.fsdp import loads_on_rank0
from arl.models.config import ModelSettings, model_settings
from arl.models.tiny import FORMAT_TOKENS, TinyConfig, default_cache_dir
from arl.plan.memory import (
    GIB,
    KNOWN_ARCHITECTURES,
    Architecture,
    Change,
    MemoryPlan,
    Setup,
    architecture_from_hf_config,
    format_plan,
    make_plan,
    suggestions,
    verdict_line,
    vllm_minimum_bytes,
)
from arl.rollout.vllm_config import VLLMSettings, vllm_settings
from arl.rollout.vllm_engine import hub_snapshot, kv_cache_bytes
from arl.utils.config import ConfigError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # model.dtype, rl.reference_dtype

DEFAULT_GPU_GB = 80  # plan.gpu_memory_gb when no GPU is visible: an 80 GB A100/H100 (set the key for any other)


class PlanError(ValueError):
    """The plan cannot be made (an unknown model, an unreadable config.json); the message says why."""


# ------------------------------------------------------------------------------ architecture


def _folder_config(folder: Path, name: str) -> Architecture:
    config = folder / "config.json"
    try:
        data = json.loads(config.read_text())
        return architecture_from_hf_config(data.get("text_config", data), name, f"{config}")
    except (OSError, ValueError, KeyError) as err:
        raise PlanError(f"{config}: cannot read the architecture ({err})") from None


def _tiny_architecture(model: ModelSettings) -> Architecture:
    """The embedded model: its config from ``model.tiny`` (TinyConfig's defaults for the rest); the
    vocabulary of its cached build when there is one, else the BPE target plus the four format
    tokens added after training (an upper bound: the Sokoban corpus fills 540)."""
    cfg = model.tiny or TinyConfig()
    root = Path(model.cache_dir) if model.cache_dir else default_cache_dir()
    wanted = asdict(cfg)
    builds = []
    for meta in glob.glob(str(root / "tiny-*" / "arl_tiny.json")):
        try:
            if json.loads(Path(meta).read_text()) == wanted and (Path(meta).parent / "config.json").exists():
                builds.append(Path(meta).parent)
        except (OSError, ValueError):
            continue
    if builds:
        newest = max(builds, key=lambda p: p.stat().st_mtime)
        return _folder_config(newest, "tiny")
    return Architecture(
        "tiny", cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
        cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size + len(FORMAT_TOKENS), cfg.tie_word_embeddings,
        qk_norm=True,
        source="model.tiny (not built yet: vocabulary = its bound, BPE target + 4 format tokens)",
    )


def resolve_architecture(model: ModelSettings | Mapping[str, Any]) -> Architecture:
    """The :class:`Architecture` a ``model`` config (or its typed section) loads, without loading it.

    ``model.init_from`` and a local ``model.path`` are read from their ``config.json``; the
    embedded tiny model from its config; SmolLM2 from the table; a hub id from the HF cache when it
    holds the model, else from :data:`~arl.plan.memory.KNOWN_ARCHITECTURES`.

    Raises:
        PlanError: a hub id the table does not know and the cache does not hold, or a folder
            without a readable ``config.json``.
    """
    model = model_settings(model)
    if model.init_from:
        return _folder_config(Path(model.init_from).expanduser(), model.init_from)
    name, path = model.name, model.path
    if name == "tiny" and not path:
        return _tiny_architecture(model)
    if name == "smollm2_135m" and (not path or not (Path(path).expanduser() / "config.json").exists()):
        return KNOWN_ARCHITECTURES["HuggingFaceTB/SmolLM2-135M-Instruct"]
    if not path:
        raise PlanError(f"model.path is not set for model={name}")
    folder = Path(path).expanduser()
    if folder.is_dir():
        if (folder / "config.json").exists():
            return _folder_config(folder, path)
        raise PlanError(f"model.path={path} holds no config.json (a GGUF folder): "
                        "pass model.path=<local folder with config.json>")
    snapshot = hub_snapshot(path)
    if snapshot is not None:
        return _folder_config(snapshot, path)
    if path in KNOWN_ARCHITECTURES:
        return KNOWN_ARCHITECTURES[path]
    raise PlanError(
        f"model.path={path}: an architecture the plan does not know "
        f"(known hub ids: {', '.join(sorted(KNOWN_ARCHITECTURES))}) "
        "and not in the HF cache; pass model.path=<local folder with config.json>"
    )


# ------------------------------------------------------------------------------ the run


@dataclass
class Machine:
    """What this machine has: the visible GPUs (count, name, bytes of the first) and host memory."""

    gpus: int = 0
    gpu_name: str = ""
    gpu_bytes: int = 0
    host_bytes: int = 0

    @classmethod
    def here(cls) -> Machine:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        if not torch.cuda.is_available():
            return cls(0, "", 0, host)
        props = torch.cuda.get_device_properties(0)
        return cls(torch.cuda.device_count(), props.name, int(props.total_memory), host)


def _strategy(trainer: Mapping[str, Any], world: int) -> str:
    strategy = trainer.get("strategy")
    name = str(strategy.get("_target_", "")) if isinstance(strategy, Mapping) else str(strategy or "")
    name = name.rsplit(".", 1)[-1].lower()
    if "modelparallel" in name or name.startswith("fsdp2"):
        return "fsdp2"
    if "fsdp" in name:
        return "fsdp"
    if "ddp" in name or (world > 1 and name in ("", "auto")):
        return "ddp"
    return "single"


def _devices(trainer: Mapping[str, Any], machine: Machine, on_gpu: bool, notes: list[str]) -> int:
    devices = trainer.get("devices", 1)
    if isinstance(devices, (list, tuple)):
        return max(len(devices), 1)
    if isinstance(devices, str) and devices not in ("auto", "-1"):
        return max(len([d for d in devices.split(",") if d.strip()]), 1)
    if devices in (-1, "-1", "auto"):
        if on_gpu and machine.gpus:
            return machine.gpus
        notes.append("trainer.devices=-1 (all GPUs) and none is visible here: planned for 1 device; "
                     "pass trainer.devices=N for the node you will run on")
        return 1
    return max(int(devices), 1)


def setup_from_config(c: Mapping[str, Any], arch: Architecture, machine: Machine) -> tuple[Setup, str, list[str]]:
    """(Setup, where the capacity comes from, notes) of a resolved config dict ``c``."""
    notes: list[str] = []
    trainer, model, rollout, rl = c["trainer"], model_settings(c["model"]), c["rollout"], c["rl"]
    accelerator = str(trainer.get("accelerator", "cpu"))
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and machine.gpus > 0)
    devices = _devices(trainer, machine, on_gpu, notes)
    nodes = int(trainer.get("num_nodes", 1) or 1)
    strategy = _strategy(trainer, devices * nodes)
    shards, master, compute, checkpointing = _training_terms(trainer, model, strategy, devices * nodes)
    lora = model.lora
    vcfg = vllm_settings(rollout["vllm"]) if rollout.get("vllm") is not None else None  # rollout=vllm only
    vllm_bytes, max_model_len, kv_bytes = _vllm_terms(rollout, vcfg, arch, on_gpu)
    vllm_memory = {} if vcfg is None else {"vllm_utilization": vcfg.gpu_memory_utilization,
                                           "vllm_sleep": vcfg.enable_sleep_mode and on_gpu,
                                           "vllm_sleep_level": vcfg.sleep_level}
    capacity, source = _capacity(c.get("plan") or {}, on_gpu, machine, devices)
    row_tokens = int(rollout["max_prompt_tokens"]) + int(rollout["max_new_tokens"])
    bc = c.get("bc") or {}
    bc_trains = bool(bc.get("enabled")) and int(bc.get("epochs") or 0) > 0 and not model.init_from
    # a BC step takes this rank's share of a global batch (arl.datamodules.sft_datamodule.GlobalBatchShares),
    # one micro-batch of at most bc.micro_token_budget tokens (or one row) at a time
    share = -(-int(bc["batch_size"]) // (devices * nodes)) * row_tokens
    bc_tokens = min(share, max(int(bc["micro_token_budget"]), row_tokens)) if bc_trains else 0
    setup = Setup(
        device="gpu" if on_gpu else "cpu", strategy=strategy, shards=shards, nodes=nodes, master_bytes=master,
        compute=compute, lora_rank=lora.r if lora.enabled else None,
        lora_targets=lora.target_modules, reference=float(c["algo"]["kl"]["coef"]) > 0 and not lora.enabled,
        reference_bytes_per_param=DTYPE_BYTES.get(str(rl.get("reference_dtype"))),
        checkpointing=checkpointing, logit_chunk_tokens=model.logit_chunk_tokens, tokens=int(rl["micro_token_budget"]),
        bc_tokens=bc_tokens, row_tokens=row_tokens, engine=str(rollout["engine"]), rank0_loads=loads_on_rank0(c.get("trainer") or {}, str(rollout["engine"])),
        **vllm_memory, vllm_kv_cache_bytes=int(kv_bytes) if kv_bytes else None, vllm_dtype_bytes=vllm_bytes,
        vllm_max_model_len=max_model_len, hf_rows=int(rollout["max_batch_size"]),
        hf_prompt_tokens=int(rollout["max_prompt_tokens"]), hf_new_tokens=int(rollout["max_new_tokens"]),
        capacity_bytes=capacity, device_total_bytes=capacity,
    )
    if on_gpu:
        notes.append(host_note(arch, setup, devices))
    if setup.engine == "vllm" and on_gpu and not setup.vllm_kv_cache_bytes:
        need = vllm_minimum_bytes(arch, setup)
        if setup.vllm_utilization * setup.device_total_bytes < need:
            notes.append(f"vLLM's share ({setup.vllm_utilization:g} x {setup.device_total_bytes / GIB:.1f} GiB) is "
                         f"below the {need / GIB:.1f} GiB its weights and one {max_model_len}-token sequence need: "
                         "it will not start")
    return setup, source, notes


def _training_terms(trainer: Mapping[str, Any], model: ModelSettings, strategy: str, world: int) -> tuple[int, int, str, bool]:
    """(shards, bytes per master weight, compute precision, activation checkpointing) of the trainer."""
    sharding = trainer.get("sharding") or {}
    shards = 1
    if strategy == "fsdp2":
        strategy_cfg = trainer.get("strategy")
        dp = strategy_cfg.get("data_parallel_size") if isinstance(strategy_cfg, Mapping) else None
        shards = int(dp) if dp not in (None, "auto") else world
    elif strategy == "fsdp":
        shards = world
    master = DTYPE_BYTES[model.dtype]
    precision = str(trainer.get("precision", "32-true"))
    compute = "fp32"
    if precision in ("bf16-true", "16-true"):
        compute, master = "half", 2
    elif strategy == "fsdp2" and sharding.get("mixed_precision"):
        compute = "half"
    elif precision in ("bf16-mixed", "16-mixed"):
        compute = "half" if strategy == "fsdp" else "autocast"
    checkpointing = bool(sharding.get("activation_checkpointing")) if strategy in ("fsdp2", "fsdp") else (
        model.gradient_checkpointing)
    return shards, master, compute, checkpointing


def _vllm_terms(rollout: Mapping[str, Any], vcfg: VLLMSettings | None, arch: Architecture,
                on_gpu: bool) -> tuple[int, int, Any]:
    """(bytes per vLLM weight, max_model_len, KV-cache bytes or None) of the rollout engine (``vcfg``:
    its ``rollout.vllm`` block, None for the transformers engine)."""
    row_tokens = int(rollout["max_prompt_tokens"]) + int(rollout["max_new_tokens"])
    vllm_dtype = vcfg.dtype if vcfg is not None else "auto"
    # vLLM's dtype "auto": the checkpoint's bf16/fp16 on a GPU (fp32 checkpoints run in half precision;
    # vLLM's --dtype docs), float32 on a CPU (arl.rollout.vllm_engine.llm_kwargs)
    vllm_bytes = 4 if vllm_dtype == "float32" or (vllm_dtype == "auto" and not on_gpu) else 2
    max_model_len = (vcfg.max_model_len if vcfg is not None else None) or row_tokens
    kv_bytes = vcfg.kv_cache_memory_bytes if vcfg is not None else None
    if str(rollout["engine"]) == "vllm" and not on_gpu and kv_bytes is None:
        shape = SimpleNamespace(num_hidden_layers=arch.layers, num_key_value_heads=arch.kv_heads,
                                head_dim=arch.head_dim, num_attention_heads=arch.heads, hidden_size=arch.hidden)
        kv_bytes = kv_cache_bytes(shape, max_model_len, int(rollout["max_batch_size"]), vllm_bytes)
    return vllm_bytes, max_model_len, kv_bytes


def _capacity(plan_cfg: Mapping[str, Any], on_gpu: bool, machine: Machine, devices: int) -> tuple[int, str]:
    """(bytes one process may use, where that number comes from)."""
    if plan_cfg.get("gpu_memory_gb") is not None:
        return int(float(plan_cfg["gpu_memory_gb"]) * GIB), f"plan.gpu_memory_gb={plan_cfg['gpu_memory_gb']}"
    if on_gpu and machine.gpus:
        return machine.gpu_bytes, f"the visible {machine.gpu_name}"
    if on_gpu:
        return DEFAULT_GPU_GB * GIB, f"no GPU visible: {DEFAULT_GPU_GB} GiB assumed, set plan.gpu_memory_gb"
    per_host = devices  # the processes of one node share its memory
    source = f"this machine's {machine.host_bytes / GIB:.1f} GiB RAM"
    source += f" / {per_host} processes" if per_host > 1 else ""
    return machine.host_bytes // max(per_host, 1), source


def host_note(arch: Architecture, s: Setup, world_per_node: int) -> str:
    """Host memory of one node (not checked) at start-up and after.

    Every process that loads (all of them, or rank 0 alone under ``trainer.sharding.load: rank0``,
    where the others build the model on the meta device) holds the full policy and its reference
    copy (none under LoRA) before sharding, and with every rank loading under FSDP also the
    engine's copy (rank-0 loading has none: vLLM receives its weights by broadcast). Afterwards the
    engine's copy (FSDP with vLLM, every rank loading: kept on the host) and, at sleep level 1,
    vLLM's sleeping weights (pinned host memory) stay; level 2 discards them."""
    p = arch.params() * s.master_bytes
    reference = int(s.reference) * arch.params() * (s.reference_bytes_per_param or s.master_bytes)
    engine_copy = s.sharded and not s.rank0_loads
    one = p * (1 + int(engine_copy)) + reference
    loaders = 1 if s.rank0_loads else world_per_node
    steady = p if engine_copy and s.engine == "vllm" else 0
    steady += arch.params() * s.vllm_dtype_bytes if s.vllm_sleep and s.vllm_sleep_level == 1 else 0
    parts = "policy" + (" + reference copy" if s.reference else "") + (" + engine copy" if engine_copy else "")
    who = (f"rank 0 loads {parts}, {one / GIB:.1f} GiB; the other {world_per_node - 1} build on the meta device"
           if s.rank0_loads and world_per_node > 1 else
           f"{loaders} process{'es' if loaders > 1 else ''} x {one / GIB:.1f} GiB: {parts}")
    later = f" (rank 0: {p / GIB:.1f} GiB again while it gathers the BC result or the export)" if s.rank0_loads else ""
    return (f"host memory per node (not checked): about {loaders * one / GIB:.0f} GiB at start-up ({who}), "
            f"{world_per_node * steady / GIB:.0f} GiB after{later}")


# ------------------------------------------------------------------------------ the report


@dataclass
class PlanReport:
    """A plan with what it was made from and what to change."""

    plan: MemoryPlan
    capacity_source: str
    notes: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.plan.fits

    def verdict(self) -> str:
        return verdict_line(self.plan, self.capacity_source)

    def advice(self) -> str:
        """What to change when the plan does not fit (empty when it fits)."""
        if self.fits:
            return ""
        p = self.plan
        lines = [(f"the {p.peak_phase} phase needs {p.peak_bytes / GIB:.1f} GiB of "
                  f"{p.setup.capacity_bytes / GIB:.1f} GiB. Change (each alone, the largest saving first; "
                  "'fits' = enough by itself):")]
        for ch in self.changes:
            lines.append(f"  {ch.override:<48} peak {ch.peak_bytes / GIB:7.1f} GiB  saves {ch.saves_bytes / GIB:6.1f}"
                         f"  {'fits' if ch.fits else '    '}" + (f"  ({ch.note})" if ch.note else ""))
        if not self.changes:
            lines.append("  (no single config change lowers it)")
        return "\n".join(lines)

    def text(self) -> str:
        p = self.plan
        compute = {"fp32": "fp32", "half": "bf16 compute (params cast)", "autocast": "bf16 autocast"}[p.setup.compute]
        run = (f"run: {describe_strategy(p.setup)}, {compute}, activation checkpointing "
               f"{'on' if p.setup.checkpointing else 'off'}, micro-batch {p.setup.micro_tokens} tokens "
               f"(rows up to {p.setup.row_tokens}), engine {p.setup.engine}")
        out = [f"model: {p.arch.describe()}", run, "", format_plan(p).replace(verdict_line(p), self.verdict())]
        out += [f"note: {n}" for n in self.notes]
        advice = self.advice()
        if advice:
            out += ["", advice]
        return "\n".join(out)


def describe_strategy(s: Setup) -> str:
    if s.sharded:
        return f"{'FSDP2' if s.strategy == 'fsdp2' else 'FSDP1'} over {s.shards} shard{'s' if s.shards > 1 else ''}"
    return "DDP (every process holds all of it)" if s.strategy == "ddp" else "one process"


def _as_dict(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def plan_config(cfg: DictConfig | Mapping[str, Any], machine: Machine | None = None) -> PlanReport:
    """The :class:`PlanReport` of a composed training config on ``machine`` (default: this one)."""
    c = _as_dict(cfg)
    arch = resolve_architecture(c["model"])
    machine = machine or Machine.here()
    setup, source, notes = setup_from_config(c, arch, machine)
    report = PlanReport(make_plan(arch, setup), source, notes)
    if not report.fits:
        report.changes = suggestions(arch, setup)
    return report


def on_gpu(c: Mapping[str, Any]) -> bool:
    """Whether the run puts its trainer or its rollout on a GPU."""
    accelerator = str((c.get("trainer") or {}).get("accelerator", "cpu"))
    return accelerator in ("gpu", "cuda", "auto") or c["rollout"]["engine"] == "vllm"


def startup_check(cfg: DictConfig | Mapping[str, Any]) -> str:
    """``src/train.py``'s check, after the machine check: the plan's verdict line.

    Raises :class:`~arl.utils.config.ConfigError` with the plan and what to change when a GPU is
    visible, the run uses it and the plan does not fit (``plan.check=false`` skips the check). A
    plan that cannot be made (an unknown architecture) is reported in the line, not raised.
    """
    c = _as_dict(cfg)
    if not (c.get("plan") or {}).get("check", True):
        return "memory plan: not checked (plan.check=false)"
    machine = Machine.here()
    try:
        report = plan_config(c, machine)
    except (PlanError, KeyError, TypeError, ValueError) as err:  # a plan that cannot be made does not stop the run
        return f"memory plan: not made ({type(err).__name__}: {err})"
    if machine.gpus > 0 and on_gpu(c) and not report.fits:
        raise ConfigError(f"{report.verdict()}\n{report.advice()}\n(python src/plan.py <the same overrides> prints the "
                          "whole plan; plan.check=false skips this check)")
    return report.verdict()


__all__ = ["DEFAULT_GPU_GB", "Machine", "PlanError", "PlanReport", "on_gpu", "plan_config", "resolve_architecture",
           "setup_from_config", "startup_check"]
