"""The memory plan's arithmetic (``arl.plan.memory``) and the architectures it is made for
(``arl.plan.resolve_architecture``): numbers worked by hand, the activation formula against the
tensors autograd really saves, properties, and the parameter counts of real models."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import product

import pytest

from arl.plan import PlanError, resolve_architecture
from arl.plan.memory import (
    CUDA_CONTEXT_BYTES,
    GIB,
    KNOWN_ARCHITECTURES,
    NCCL_BYTES,
    Architecture,
    Setup,
    architecture_from_hf_config,
    bc_phase_bytes,
    block_activation_bytes,
    logits_bytes,
    make_plan,
    outside_activation_bytes,
    suggestions,
)
from arl_testing import model_config

# A 2-layer Qwen3-style model small enough to work out on paper.
HAND = Architecture("hand", layers=2, hidden=64, intermediate=256, heads=4, kv_heads=2, head_dim=16, vocab=1000,
                    tied_embeddings=True, qk_norm=True)


def test_a_two_layer_model_by_hand_on_one_cpu_process():
    # parameters of one block: q 64x64 = 4096, k 64x32 = 2048, v 2048, o 64x64 = 4096,
    # gate/up/down 3 x 64x256 = 49152 -> 61440; two RMSNorms 2 x 64; q/k norms 2 x 16 -> 61600.
    # root: the tied embedding 1000 x 64 + the final norm 64 = 64064. P = 2 x 61600 + 64064 = 187264.
    assert HAND.block_params() == 61600 and HAND.root_params() == 64064 and HAND.params() == 187264
    s = Setup(device="cpu", strategy="single", compute="fp32", reference=True, checkpointing=False, tokens=1024,
              row_tokens=128, engine="hf", hf_rows=4, hf_prompt_tokens=100, hf_new_tokens=28, capacity_bytes=GIB,
              device_total_bytes=GIB)
    plan = make_plan(HAND, s)
    rows = {r.name: r.bytes for r in plan.rows}
    # weights, reference, gradients: P x 4 B = 749056 each; AdamW: 2 x P x 4 B = 1498112
    assert rows["policy weights"] == rows["reference (frozen)"] == rows["gradients"] == 749056
    assert rows["AdamW moments"] == 1498112
    assert rows["compute copies"] == 0
    # one layer's saved tensors per token (fp32: a = r = 4; a padding mask over rows of T = 128):
    #   two RMSNorms 2 x (4h + 4 + 4h) = 2 x 516 = 1032; the projections' inputs 2 x 4h = 512;
    #   q/k norms 4nq + 4 heads + 4nq + 4nkv + 4 kv heads + 4nkv = 256 + 16 + 256 + 128 + 8 + 128 = 792;
    #   SDPA 4 x (2nq + 2nq: k, v expanded to every head) + 4 heads + 4T = 1024 + 16 + 512 = 1552;
    #   MLP 4 x 4 x I = 4096. Total 7984.
    assert block_activation_bytes(HAND, "fp32", 128) == 7984
    # outside the blocks: ids 8 + final norm 516 + LM head input 4h = 256 + cos, sin 2 x 16 x 4 = 128 -> 908
    assert outside_activation_bytes(HAND, "fp32", 128) == 908
    # N = 1024 tokens: kept activations 1024 x (2 x 7984 + 908) = 17281024
    assert rows["activations kept"] == 17281024
    # logits: 6 copies x 1024 tokens (one chunk: C = N = 1024) x 1000 vocab x 4 B = 24576000; a block's
    # backward 1024 x 2 x 4 x 256 = 2097152
    assert rows["logits (score + backward)"] == 24576000 and rows["block backward"] == 2097152
    # scored 256 positions at a time: 6 x 256 x 1000 x 4 B; a chunk larger than the micro-batch is the micro-batch
    assert logits_bytes(HAND, replace(s, logit_chunk_tokens=256)) == 6144000
    assert logits_bytes(HAND, replace(s, logit_chunk_tokens=4096)) == 24576000
    # the transformers engine generates with the policy itself: a static cache of 4 rows x 128 tokens x
    # (2 x 2 layers x 32 x 4 B) = 262144, the prefill 400 tokens x (3 x 256 + 2 x 64) x 4 = 1433600 and
    # its 400 x 100 x 4 = 160000 mask, or later the raw logits of every step kept for the log-probs,
    # 4 rows x 28 steps x 1000 vocab x 4 B = 448000 (not at once: the larger)
    assert rows["engine asleep / kept during the update"] == 0
    assert rows["engine awake (generation)"] == 262144 + max(1433600 + 160000, 448000)
    logit_heavy = {r.name: r.bytes for r in make_plan(HAND, replace(s, hf_new_tokens=1000)).rows}
    # 1000 answer tokens: the cache 4 x 1100 x 512 B = 2252800 and the logits 4 x 1000 x 1000 x 4 B = 16000000
    assert logit_heavy["engine awake (generation)"] == 2252800 + 16000000
    assert rows["CUDA context"] == 0
    # update: 3 x 749056 + 1498112 + 17281024 + max(24576000, 2097152) = 45602304
    # generation: 3745280 (resident) - 749056 (gradients, freed after the update) + 1855744 = 4851968
    assert plan.phases == {"update": 45602304, "generation": 4851968}
    assert plan.peak_bytes == 45602304 and plan.peak_phase == "update" and plan.fits
    assert plan.trainer_bytes() == 45602304
    # a BC stage whose passes are 512 tokens: weights + gradients + AdamW 2996224, no reference,
    # activations 512 x (2 x 7984 + 908) = 8640512, max(logits, log-probs only: 4 x 512 x 1000 x 4 = 8192000,
    # block backward 512 x 2 x 4 x 256 = 1048576) -> 19828736
    assert bc_phase_bytes(HAND, replace(s, bc_tokens=512)) == 19828736
    assert make_plan(HAND, replace(s, bc_tokens=512)).phases == {"update": 45602304, "generation": 4851968, "bc": 19828736}


def test_the_same_model_sharded_in_bf16_with_checkpointing_and_vllm_by_hand():
    s = Setup(device="gpu", strategy="fsdp2", shards=2, compute="half", reference=True, checkpointing=True,
              tokens=1024, row_tokens=128, engine="vllm", vllm_utilization=0.5, vllm_sleep=True,
              capacity_bytes=16 * GIB, device_total_bytes=16 * GIB)
    rows = {r.name: r.bytes for r in make_plan(HAND, s).rows}
    # per shard: weights, reference, gradients 187264 x 4 / 2 = 374528; AdamW 749056
    assert rows["policy weights"] == rows["reference (frozen)"] == rows["gradients"] == 374528
    assert rows["AdamW moments"] == 749056
    # rl.reference_dtype=bfloat16: the reference alone halves, 187264 x 2 / 2
    half_ref = {r.name: r.bytes for r in make_plan(HAND, replace(s, reference_bytes_per_param=2)).rows}
    assert half_ref["reference (frozen)"] == 187264 and half_ref["policy weights"] == 374528
    # gathered in bf16: (root 64064 + 2 blocks x 61600) x 2 = 374528; unsharded grads of the root and a block
    # (64064 + 61600) x 2 = 251328, and the block's fp32 reduce-scatter copy 61600 x 4 = 246400
    assert rows["compute copies"] == 374528 + 251328 + 246400
    # checkpointed: one bf16 hidden state per layer (2 x 64 = 128) + outside: ids 8 + final norm
    # (4h + 4 + 2h = 388) + LM head input 128 + cos, sin 2 x 16 x 2 = 64 + the boolean mask T = 128 -> 716
    assert rows["activations kept"] == 1024 * (2 * 128 + 716)
    # a block's backward: its recomputed bf16 activations (norms 2 x 388 = 776, inputs 256, q/k norms
    # 256 + 16 + 128 + 128 + 8 + 64 = 600, SDPA 2 x 256 + 16 + 2 x 128 = 784, MLP 2048 -> 4464)
    # + the MLP's gradients in flight 2 x 2 x 256 = 1024
    assert block_activation_bytes(HAND, "half", 128) == 4464
    assert rows["block backward"] == 1024 * (4464 + 1024)
    assert rows["engine asleep / kept during the update"] == 0
    assert rows["engine awake (generation)"] == 8 * GIB
    assert rows["CUDA context"] == CUDA_CONTEXT_BYTES == 1343 * 2**20
    # two GPU processes: one NCCL communicator's buffers, 4 MiB x 2 peers x 32 channels x 2 protocols
    assert rows["NCCL buffers"] == NCCL_BYTES == 512 * 2**20
    assert {r.name: r.bytes for r in make_plan(HAND, replace(s, strategy="single", shards=1)).rows}["NCCL buffers"] == 0
    plan = make_plan(HAND, s)
    resident = 3 * 374528 + 749056
    assert plan.phases["update"] == resident + 872256 + 1024 * 972 + 24576000 + CUDA_CONTEXT_BYTES + NCCL_BYTES
    assert plan.phases["generation"] == resident - rows["gradients"] + 8 * GIB + CUDA_CONTEXT_BYTES + NCCL_BYTES
    assert plan.peak_phase == "generation" and plan.fits


# --------------------------------------------------------------------------- the formula against autograd


def _saved_bytes_per_token(kind: str, layers: int, compute: str, masked: bool, checkpointing: bool,
                           rows: int = 3, width: int = 50) -> float:
    """Bytes autograd saves for backward per token in a transformers model of ``layers`` layers
    (each storage counted once; parameters and, under autocast, the cached bf16 weights left out:
    rows x width = 150 divides no weight dimension)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from arl.models.loading import enable_gradient_checkpointing

    cls, config = (Qwen3ForCausalLM, Qwen3Config) if kind == "qwen3" else (LlamaForCausalLM, LlamaConfig)
    torch.manual_seed(0)
    model = cls(config(vocab_size=1000, hidden_size=128, intermediate_size=512, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True))
    if compute == "half":
        model = model.to(torch.bfloat16)
    if checkpointing:
        enable_gradient_checkpointing(model)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        weight_cast = t.dim() == 2 and t.shape[0] % (rows * width) != 0
        if storage.data_ptr() not in params and not weight_cast:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(3, 1000, (rows, width))
    mask = torch.ones(rows, width, dtype=torch.long)
    if masked:
        mask[0, width - 8:] = 0
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute == "autocast")
    with autocast, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, attention_mask=mask, position_ids=torch.arange(width).expand(rows, width), use_cache=False)
    return sum(seen.values()) / (rows * width)


@pytest.mark.parametrize("kind, compute, masked, checkpointing",
                         list(product(("qwen3", "llama"), ("fp32", "half", "autocast"), (False, True), (False, True))))
def test_the_activation_formula_is_what_autograd_saves(kind, compute, masked, checkpointing):
    arch = Architecture(kind, 1, 128, 512, 4, 2, 32, 1000, True, qk_norm=kind == "qwen3")
    one = _saved_bytes_per_token(kind, 1, compute, masked, checkpointing)
    three = _saved_bytes_per_token(kind, 3, compute, masked, checkpointing)
    per_layer = (three - one) / 2
    r = 2 if compute == "half" else 4
    if checkpointing:  # a checkpointed block keeps its input hidden state only
        assert per_layer == r * 128
    else:
        assert per_layer == block_activation_bytes(arch, compute, 50, masked)
    outside = outside_activation_bytes(arch, compute, 50, masked, checkpointing)
    if checkpointing:  # cos, sin and the mask reach a checkpointed block through its closure: alive, not "saved"
        outside -= 2 * 32 * r + (50 if masked else 0)
    assert one - per_layer == pytest.approx(outside, abs=8)  # autocast: the 8-byte ids are counted once less


# --------------------------------------------------------------------------- properties

ARCHS = [HAND, KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"], KNOWN_ARCHITECTURES["HuggingFaceTB/SmolLM2-135M-Instruct"],
         Architecture("tiny", 4, 128, 512, 4, 2, 32, 540, True, qk_norm=True)]
SETUPS = [
    Setup(device=d, strategy=st, compute=c, checkpointing=ck, reference=ref, tokens=t, row_tokens=512, engine=e,
          vllm_sleep=sl, shards=2 if st in ("fsdp2", "fsdp") else 1)
    for d, st, c, ck, ref, t, e, sl in product(
        ("gpu",), ("single", "ddp", "fsdp2", "fsdp"), ("fp32", "half", "autocast"), (False, True), (False, True),
        (2048, 32768), ("hf", "vllm"), (False, True))
] + [Setup(device="cpu", strategy="single", checkpointing=ck, tokens=t) for ck in (False, True) for t in (512, 16384)]


def _peak(arch, s):
    return make_plan(arch, s).peak_bytes


def test_more_devices_never_raise_the_per_device_peak():
    for arch, s in product(ARCHS, SETUPS):
        if s.sharded:
            assert _peak(arch, replace(s, shards=2 * s.shards)) <= _peak(arch, s), (arch.name, s)
        else:  # DDP or one process: every device holds the same
            assert _peak(arch, s) == _peak(arch, replace(s, shards=8))


def test_lora_never_raises_the_peak():
    for arch, s in product(ARCHS, SETUPS):
        assert _peak(arch, replace(s, lora_rank=16)) <= _peak(arch, s), (arch.name, s)


def test_activation_checkpointing_never_raises_the_peak():
    for arch, s in product(ARCHS, SETUPS):  # every architecture here has at least two layers
        if not s.checkpointing:
            assert _peak(arch, replace(s, checkpointing=True)) <= _peak(arch, s), (arch.name, s)


def test_a_smaller_budget_and_no_reference_never_raise_the_peak():
    for arch, s in product(ARCHS, SETUPS):
        assert _peak(arch, replace(s, tokens=s.tokens // 2)) <= _peak(arch, s)
        assert _peak(arch, replace(s, reference=False)) <= _peak(arch, s)


def test_what_to_change_is_ordered_by_saving_and_each_lowers_the_peak():
    arch = KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"]
    s = Setup(device="gpu", strategy="fsdp2", shards=8, compute="half", checkpointing=True, tokens=32768,
              logit_chunk_tokens=32768, row_tokens=4608, engine="vllm", vllm_sleep=True, capacity_bytes=80 * GIB,
              device_total_bytes=80 * GIB)
    assert not make_plan(arch, s).fits
    assert make_plan(arch, replace(s, logit_chunk_tokens=1024)).fits  # the shipped chunk
    changes = suggestions(arch, s)
    assert [c.saves_bytes for c in changes] == sorted((c.saves_bytes for c in changes), reverse=True)
    assert changes[0].override == "rl.micro_token_budget=16384" and changes[0].fits
    assert changes[1].override == "model.logit_chunk_tokens=16384" and changes[1].fits
    assert all(c.peak_bytes < make_plan(arch, s).peak_bytes for c in changes)
    assert {"model.lora.enabled=true", "algo.kl.coef=0"} <= {c.override for c in changes}


# --------------------------------------------------------------------------- architectures


def test_qwen3_4b_has_4_02_billion_parameters():
    arch = KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"]
    assert (arch.layers, arch.hidden, arch.intermediate, arch.heads, arch.kv_heads, arch.head_dim, arch.vocab) == (
        36, 2560, 9728, 32, 8, 128, 151936) and arch.tied_embeddings
    assert arch.params() == pytest.approx(4.02e9, rel=0.01)
    assert arch.params() == 4_022_468_096  # 36 x 100930816 + 151936 x 2560 + 2560
    assert arch.params() - arch.root_params() == pytest.approx(3.6e9, rel=0.01)  # the model card's "non-embedding"
    assert arch.lora_params(16) == 33_030_144  # rank 16 on all seven projections


def test_the_other_known_models_match_their_model_cards():
    assert KNOWN_ARCHITECTURES["Qwen/Qwen3-1.7B"].params() == pytest.approx(1.7e9, rel=0.02)
    assert KNOWN_ARCHITECTURES["Qwen/Qwen3-8B"].params() == pytest.approx(8.2e9, rel=0.01)
    assert KNOWN_ARCHITECTURES["HuggingFaceTB/SmolLM2-135M-Instruct"].params() == 134_515_008  # 134.5M as loaded


def test_the_tiny_model_is_planned_from_its_build(tiny):
    model, _ = tiny
    arch = resolve_architecture(model_config("tiny"))
    assert arch.params() == sum(p.numel() for p in model.parameters())
    assert arch.vocab == model.config.vocab_size


def test_an_unbuilt_tiny_model_is_planned_with_its_vocabulary_bound(tmp_path):
    arch = resolve_architecture(model_config("tiny", cache_dir=str(tmp_path), tiny={"hidden_size": 256}))
    assert arch.hidden == 256 and arch.vocab == 1024 + 4 and "not built" in arch.source


def test_a_local_folder_is_read_from_its_config_json(tmp_path):
    config = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 256,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    arch = resolve_architecture(model_config("hf", path=str(tmp_path)))
    assert arch == architecture_from_hf_config(config, str(tmp_path), arch.source)
    assert arch.head_dim == 16 and arch.attention_bias and not arch.qk_norm and not arch.tied_embeddings
    # Qwen2's q, k, v biases: 64 + 2 x 32 per layer; an untied head: 2 x 1000 x 64
    assert arch.params() == 2 * (61440 + 128 + 128) + 2 * 64000 + 64


def test_an_unknown_hub_id_asks_for_a_local_folder():
    with pytest.raises(PlanError, match=r"pass model.path=<local folder with config.json>"):
        resolve_architecture(model_config("hf", path="nobody/NoSuchModel-7B"))


def test_the_host_note_counts_sleeping_engine_weights_only_at_sleep_level_1():
    """Host memory of a node, by hand for Qwen3-4B on 8 GPUs (FSDP2, vLLM asleep): at start-up each
    process holds the policy, the reference copy and the engine's copy (3 x P x 4 B = 45.0 GiB); after
    it, the engine's copy (P x 4 B) and, at sleep level 1 only, vLLM's bf16 weights (P x 2 B)."""
    from arl.plan import host_note

    arch = KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"]
    s = Setup(device="gpu", strategy="fsdp2", shards=8, engine="vllm", vllm_sleep=True)
    p = arch.params()
    assert f"about {8 * 3 * p * 4 / GIB:.0f} GiB at start-up" in host_note(arch, s, 8)
    assert f", {8 * p * 4 / GIB:.0f} GiB after" in host_note(arch, s, 8)  # level 2: weights discarded
    assert f", {8 * p * 6 / GIB:.0f} GiB after" in host_note(arch, replace(s, vllm_sleep_level=1), 8)
    assert "reference copy" not in host_note(arch, replace(s, reference=False), 8)
