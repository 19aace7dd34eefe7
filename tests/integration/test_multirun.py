"""`python src/train.py -m debug=smoke seed=1,2`: two runs in folders named by their overrides."""

import os
import subprocess
import sys

import pytest

from arl_testing import ROOT


@pytest.mark.slow
def test_multirun_folders_named_by_overrides(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), "-m", "debug=smoke", "seed=1,2"],
        capture_output=True, text=True, timeout=900, env={**os.environ, "ARL_ROOT": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "debug" / "multiruns").iterdir()
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert names == ["debug=smoke,seed=1", "debug=smoke,seed=2"]
    for name in names:
        assert (sweep / name / "policy_hf" / "config.json").exists()
        assert any((sweep / name / "tensorboard").rglob("events.out.tfevents.*"))
