# ARL: `make train` and `make test` are the two commands of the README.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
ARGS ?=

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed ## create .venv and install torch ($(TORCH_SPEC)) then the package

train: install ## run the main job on the embedded default (experiment=sampo_sokoban, tiny model)
	$(PY) src/train.py $(ARGS)

smoke: install ## two tiny iterations end to end
	$(PY) src/train.py debug=smoke $(ARGS)

test: install ## the default (fast) test suite
	$(PY) -m pytest -q $(ARGS)

test-slow: install ## the long tests (marked slow)
	$(PY) -m pytest -q -m slow $(ARGS)

bench: install ## print the benchmark tables
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

tb: install ## TensorBoard on logs/
	$(VENV)/bin/tensorboard --logdir logs --bind_all

clean-logs: ## remove run outputs
	rm -rf logs/*/

.PHONY: help install train smoke test test-slow bench tb clean-logs
