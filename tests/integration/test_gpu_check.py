"""``bench/gpu_check.sh --cpu-dry-run``: the GPU check's own steps on this CPU (train.py under
trainer=fsdp2_cpu with the transformers engine and the tiny model, its figures, then the bare FSDP2
steps), so the script a person with a GPU runs first is known to work up to the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from arl_testing import ROOT


def test_the_gpu_check_runs_its_cpu_dry_run(tmp_path, tiny_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "gpu check (CPU dry run): OK" in proc.stdout
    figures = json.loads((tmp_path / "gpu_check_train.json").read_text())
    assert figures["iterations"] == 3 and figures["optimizer_steps"] >= 1
    for key in ("rollout_tokens_per_s", "train_tokens_per_s", "weight_sync_s"):
        assert figures[key] and figures[key] > 0, key
    bare = json.loads((tmp_path / "gpu_check_cpu.json").read_text())
    assert bare["fsdp2"] and bare["tokens_per_s"] > 0
