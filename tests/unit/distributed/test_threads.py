"""Threads per process: the cores shared among the live ARL processes (arl.distributed.threads)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from arl.distributed import threads as th
from arl_testing import ROOT


def test_parse_setting():
    assert th.parse_setting("auto") is None and th.parse_setting(None) is None and th.parse_setting("AUTO") is None
    assert th.parse_setting(3) == 3 and th.parse_setting("2") == 2
    for bad in (0, -1, "many", 1.5, True, "2.0"):
        with pytest.raises(ValueError, match="valid: auto, or a positive integer"):
            th.parse_setting(bad)


@pytest.mark.parametrize("cores,processes,expected", [(2, 1, 2), (2, 2, 1), (2, 3, 1), (16, 3, 5), (8, 0, 8)])
def test_share_divides_the_cores(cores, processes, expected):
    assert th.share(cores, processes) == expected


def _registered_sleeper(folder):
    """A second process that registers in ``folder`` and waits (as a run beside this one would)."""
    code = (
        "import sys, time; sys.path.insert(0, {!r}); from arl.distributed.threads import ThreadRegistry; "
        "r = ThreadRegistry({!r}); r.register(); print('ready', flush=True); time.sleep(60)"
    ).format(str(ROOT / "src"), str(folder))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_registry_counts_live_processes_and_drops_dead_ones(tmp_path):
    mine = th.ThreadRegistry(tmp_path)
    mine.register()
    assert mine.live() == 1
    other = _registered_sleeper(tmp_path)
    try:
        assert mine.live() == 2
    finally:
        other.kill()
        other.wait()
    assert mine.live() == 1  # a killed run leaves its file; it is recognised as dead and removed
    assert sorted(p.name for p in tmp_path.iterdir()) == [str(os.getpid())]
    (tmp_path / "999999999").write_text("123")  # a pid that does not exist
    assert mine.live() == 1 and not (tmp_path / "999999999").exists()
    mine.unregister()
    assert not any(tmp_path.iterdir())


def test_a_paused_run_leaves_its_cores_and_keeps_its_entry(tmp_path):
    """``kill -STOP`` on a run (a study held while the tests run): the others count it out until
    ``kill -CONT``, and its entry stays so that it counts again once continued."""
    import signal

    mine = th.ThreadRegistry(tmp_path)
    mine.register()
    other = _registered_sleeper(tmp_path)
    try:
        assert mine.live() == 2
        os.kill(other.pid, signal.SIGSTOP)
        deadline = time.time() + 10
        while not th._paused(other.pid) and time.time() < deadline:
            time.sleep(0.05)
        assert mine.live() == 1 and (tmp_path / str(other.pid)).exists()
        os.kill(other.pid, signal.SIGCONT)
        deadline = time.time() + 10
        while th._paused(other.pid) and time.time() < deadline:
            time.sleep(0.05)
        assert mine.live() == 2
    finally:
        other.kill()
        other.wait()


def test_a_reused_pid_is_not_a_live_run(tmp_path):
    """The entry of a dead run whose pid now belongs to another process (another start time)."""
    mine = th.ThreadRegistry(tmp_path)
    mine.register()
    (tmp_path / str(os.getppid())).write_text("1")  # the parent is alive, but started at another time
    assert mine.live() == 1


def test_auto_budget_follows_the_other_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    budget = th.ThreadBudget("auto", th.ThreadRegistry(tmp_path))
    budget.cores = 2  # as on the 2-core machine, whatever runs this test
    try:
        assert budget.automatic and budget.apply() == 2 and torch.get_num_threads() == 2
        other = _registered_sleeper(tmp_path)
        try:
            assert budget.rebalance(min_interval=0.0) == 1 and torch.get_num_threads() == 1
        finally:
            other.kill()
            other.wait()
        assert budget.rebalance(min_interval=3600.0) == 1  # not looked at again within the interval
        assert budget.rebalance(min_interval=0.0) == 2  # the other run ended: the second core comes back
    finally:
        budget.close()
        torch.set_num_threads(before)


def test_omp_num_threads_and_a_fixed_setting_win_over_auto(tmp_path, monkeypatch):
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        forced = th.ThreadBudget("auto", th.ThreadRegistry(tmp_path))
        assert not forced.automatic and forced.apply() == 1
        assert (tmp_path / str(os.getpid())).exists()  # it still counts as a process using the cores
        forced.close()
        fixed = th.ThreadBudget(3, th.ThreadRegistry(tmp_path))
        assert fixed.apply() == 3 and torch.get_num_threads() == 3
        fixed.close()
    finally:
        torch.set_num_threads(before)


def test_train_py_rejects_a_bad_thread_setting():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "train.py"), "threads=lots"], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "threads='lots' is not valid" in proc.stderr


def test_entry_points_register_and_leave(tmp_path):
    """src/train.py under threads=auto registers itself while it runs and removes its entry at exit."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    code = (
        "import sys, os; sys.path.insert(0, {!r}); from arl.distributed import threads as th; "
        "n = th.configure_threads('auto', th.ThreadRegistry({!r})); "
        "print(n, os.path.exists(os.path.join({!r}, str(os.getpid()))))"
    ).format(str(ROOT / "src"), str(tmp_path), str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    n, registered = out.stdout.split()
    assert int(n) == max(1, th.usable_cores()) and registered == "True"
    time.sleep(0.1)
    assert not any(tmp_path.iterdir())  # atexit removed the entry
