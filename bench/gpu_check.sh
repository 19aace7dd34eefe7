#!/usr/bin/env bash
# GPU check for a lent GPU machine (one H200): FSDP2 + bf16 training steps of a ~0.4B
# Qwen3-architecture model with random weights (hidden 1024, 24 layers, 16/8 heads, MLP 3072,
# vocab 32k), B=8 x L=1024 random tokens, AdamW; prints tokens/s and peak GPU memory
# (torch.cuda.max_memory_allocated) and exits non-zero on any failure. Under 5 minutes.
#
#   bash bench/gpu_check.sh                 # the check (bf16, FSDP2 via torchrun, 1 process)
#   ARL_GPU_CKPT=1 bash bench/gpu_check.sh  # + activation checkpointing (a second run)
#   bash bench/gpu_check.sh --device cpu --small   # the same script on CPU, tiny config
#
# Python: $PYTHON, else the first of python3 / .venv/bin/python whose torch sees a GPU (the lent
# machines' image has torch with CUDA, transformers and lightning, and no internet). If none has
# CUDA torch, it makes a venv under ${ARL_GPU_VENV:-/tmp/arl-gpu-venv} and pip-installs torch and
# transformers from PyPI (needs network; bounded by ARL_GPU_INSTALL_TIMEOUT, default 240 s).
# Results also go to ${OUT:-/tmp}/gpu_check.json when OUT is set (the device tool's folder).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

ARGS=("$@")
want_cpu=0
for a in "${ARGS[@]:-}"; do [[ "$a" == "cpu" ]] && want_cpu=1; done

has_torch() {  # $1: python; $2: 1 = needs CUDA
    "$1" - "$2" <<'EOF' 2>/dev/null
import sys
import torch, transformers  # noqa: F401
sys.exit(0 if (sys.argv[1] == "0" or torch.cuda.is_available()) else 1)
EOF
}

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
    for cand in python3 .venv/bin/python python; do
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

if [[ $want_cpu == 1 ]]; then
    run cpu "${ARGS[@]}"
    exit 0
fi
run fsdp2_bf16 --device cuda --steps 10 --batch 8 --seq 1024 "${ARGS[@]:+${ARGS[@]}}"
if [[ "${ARL_GPU_CKPT:-0}" == 1 ]]; then
    run fsdp2_bf16_ckpt --device cuda --steps 10 --batch 8 --seq 1024 --activation-checkpointing "${ARGS[@]:+${ARGS[@]}}"
fi
echo "gpu check: OK"
