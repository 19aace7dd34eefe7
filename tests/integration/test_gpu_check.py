"""``bench/gpu_check.sh --cpu-dry-run``: the GPU check's own steps on this CPU (train.py under
trainer=fsdp2_cpu with the transformers engine and the tiny model, its figures, the two-process leg
under torch.distributed.run with behaviour cloning first, then the bare FSDP2 steps), so the script
a person with a GPU runs first is known to work up to the device. And its start on a bare lent
machine: a python that has torch and transformers but not hydra-core, omegaconf or math-verify (a
venv that sees this one's packages but those) gets them from the kit (``make gpu-kit``), or the
script stops at once saying how to make one."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from arl_testing import ROOT

GPU_CHECK = ROOT / "bench" / "gpu_check.sh"
# what the kit brings (scripts/gpu_kit.py), hidden from the python of the bare-machine tests
KIT_DISTRIBUTIONS = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "math-verify", "latex2sympy2_extended")


@pytest.mark.long  # over a minute: make test-long, run by CI after make test
def test_the_gpu_check_runs_its_cpu_dry_run(tmp_path, tiny_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"),
           "ARL_GPU_CHECK_MULTI": "1"}
    proc = subprocess.run(["bash", str(GPU_CHECK), "--cpu-dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "gpu check (CPU dry run): OK" in proc.stdout
    assert proc.stdout.count("== plan") == 2  # both train.py legs planned (or the checkout has no src/plan.py)
    figures = json.loads((tmp_path / "gpu_check_train.json").read_text())
    assert figures["iterations"] == 3 and figures["optimizer_steps"] >= 1
    for key in ("rollout_tokens_per_s", "train_tokens_per_s", "weight_sync_s"):
        assert figures[key] and figures[key] > 0, key
    # two processes under torch.distributed.run: BC (validated before it), then 2 RL iterations whose
    # engine log-probs (fp32 here) are the trainer's
    multi = json.loads((tmp_path / "gpu_check_multi.json").read_text())
    assert multi["iterations"] == 2 and multi["optimizer_steps"] >= 1
    assert multi["rollout_max_abs_diff"] is not None and multi["rollout_max_abs_diff"] < 1e-3
    assert "the untrained policy succeeds on" in proc.stdout
    assert (tmp_path / "gpu_check_logs" / "gpu_check_multi" / "bc_policy_hf").is_dir()
    bare = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    assert bare["fsdp2"] and bare["tokens_per_s"] > 0
    # the engine it used is said and recorded: a check that never ran vLLM does not pass for one that did
    summary = json.loads((tmp_path / "gpu_check_summary.json").read_text())
    assert summary["engine"] == "hf" and not summary["vllm_checked"] and summary["skipped"] == []
    assert "the vLLM path NOT checked" in proc.stdout and summary["budget_s"] == 540


def test_the_gpu_check_keeps_to_its_time_budget(tmp_path):
    """With too little of ARL_GPU_CHECK_BUDGET left a step is skipped and named, and the check ends
    INCOMPLETE (exit 3) instead of running past the device tool's limit."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src"),
           "ARL_GPU_CHECK_MULTI": "0", "ARL_GPU_CHECK_BUDGET": "30"}
    proc = subprocess.run(["bash", str(GPU_CHECK), "--cpu-dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "== SKIPPED: train.py (1 process)" in proc.stdout and "INCOMPLETE" in proc.stdout
    summary = json.loads((tmp_path / "gpu_check_summary.json").read_text())
    assert summary["skipped"] == ["train.py (1 process)", "the bare FSDP2 steps (cpu)"]


def python_without_the_kit(folder: Path) -> Path:
    """A venv that sees this python's packages except those of the kit (and the Hydra plugins that
    need them): a python with torch and transformers but no hydra, as on the lent machine."""
    hidden = {"hydra_plugins"}
    for name in KIT_DISTRIBUTIONS:
        hidden |= {f.parts[0] for f in importlib.metadata.distribution(name).files if f.parts[0] != ".."}
    view = folder / "site-view"
    view.mkdir(parents=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name not in hidden and entry.suffix != ".pth":
            (view / entry.name).symlink_to(entry)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True, timeout=120)
    (site,) = (folder / "venv" / "lib").glob("python*/site-packages")
    (site / "site-view.pth").write_text(f"{view}\n")
    python = folder / "venv" / "bin" / "python"
    bare = subprocess.run([str(python), "-c", "import torch, transformers, pip; import hydra"], capture_output=True,
                          text=True, timeout=300)
    assert "No module named 'hydra'" in bare.stderr, bare.stderr[-2000:]
    return python


def _bare_env(tmp_path: Path, python: Path, kit: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "OUT": str(tmp_path / "out"), "PYTHON": str(python), "ARL_KIT": str(kit),
            "ARL_KIT_SITE": str(tmp_path / "kit-site")}


def test_the_gpu_check_without_hydra_or_a_kit_says_how_to_make_one(tmp_path):
    python = python_without_the_kit(tmp_path)
    (tmp_path / "out").mkdir()
    proc = subprocess.run(["bash", str(GPU_CHECK), "--cpu-dry-run"], cwd=ROOT, capture_output=True, text=True,
                          env=_bare_env(tmp_path, python, tmp_path / "no_kit"), timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "cannot import hydra" in proc.stderr and "make gpu-kit" in proc.stderr
    assert 'carry: ["gpu_kit"]' in proc.stderr
    assert list((tmp_path / "out").iterdir()) == []  # stopped before anything ran


@pytest.mark.slow  # a second whole dry run (about a minute)
def test_the_gpu_check_installs_the_kit_on_a_python_without_hydra(tmp_path, tiny_path):
    """The bare machine's path: the kit built here (PyPI), installed by the script with no index."""
    kit = tmp_path / "gpu_kit"
    build = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_kit.py"), "--out", str(kit)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    python = python_without_the_kit(tmp_path)
    proc = subprocess.run(["bash", str(GPU_CHECK), "--cpu-dry-run"], cwd=ROOT, capture_output=True, text=True,
                          env=_bare_env(tmp_path, python, kit), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = len(list(kit.glob("*.whl")))
    assert f"== the kit: {wheels} wheels of {kit} into {tmp_path / 'kit-site'}" in proc.stdout
    assert f"hydra {importlib.metadata.version('hydra-core')}" in proc.stdout  # the kit's, pinned to this venv's
    assert "gpu check (CPU dry run): OK" in proc.stdout
    assert (tmp_path / "kit-site" / "hydra").is_dir() and (tmp_path / "kit-site" / "math_verify").is_dir()
