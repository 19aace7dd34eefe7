"""EnvPool: worker subprocesses, timeouts, restarts; results independent of the worker count."""

import os
import time

import pytest

from arl.envs.pool import EnvPool

FAULTY = "faulty_env:FaultyEnv"


def _play(pool: EnvPool, seeds, steps: int):
    """Reset, then step every live slot ``steps`` times; returns (starts, per-step results)."""
    starts = pool.reset(seeds)
    live = {i for i, (_, _, err) in enumerate(starts) if not err}
    trace = []
    for k in range(steps):
        out = pool.step({s: f"a{k}" for s in sorted(live)})
        trace.append({s: (r.observation, r.reward, r.done, err) for s, (r, err) in out.items()})
        live = {s for s, (r, err) in out.items() if not err and not r.done}
    return starts, trace


@pytest.mark.parametrize("n_workers", [1, 3])
def test_workers_match_in_process(n_workers):
    seeds = [10, 11, 12, 14, 16, 19]
    local = EnvPool("sokoban", {"dim_room": [6, 6], "num_boxes": 1})
    ref = _play(local, seeds, 3)
    pool = EnvPool("sokoban", {"dim_room": [6, 6], "num_boxes": 1}, n_workers=n_workers)
    try:
        assert _play(pool, seeds, 3) == ref
        assert pool.restarts == 0 and pool.errors == 0
    finally:
        pool.close()


@pytest.mark.timeout(120)
def test_raise_and_python_hang_lose_only_their_slot():
    pool = EnvPool(FAULTY, {"length": 3}, n_workers=2, step_timeout=1.0, worker_grace=2.0)
    try:
        seeds = [1, 3, 5, 11]  # healthy, raises at step 2, hangs at step 2, healthy
        _, trace = _play(pool, seeds, 3)  # a hang that was never cut is caught by the test's timeout
        step2 = trace[1]
        assert step2[1][3] and step2[2][3]  # marked as env errors
        assert not step2[0][3] and not step2[3][3]
        # the healthy slots finish their game, in their own workers, which never restarted
        assert trace[2][0] == ("1:3", 3.0, True, False) and trace[2][3] == ("11:3", 3.0, True, False)
        assert pool.restarts == 0 and pool.errors == 2
    finally:
        pool.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [7, 8])  # 7: the worker process dies; 8: it hangs where SIGALRM cannot reach
def test_dead_or_stuck_worker_is_restarted(seed):
    pool = EnvPool(FAULTY, {"length": 3}, n_workers=2, step_timeout=1.0, worker_grace=1.0)
    try:
        # slots 0 and 2 share worker 0 with the failing slot 0; slots 1 and 3 live in worker 1
        seeds = [seed, 21, 31, 41]
        _, trace = _play(pool, seeds, 3)
        assert trace[1][0][3] is True  # the failing slot
        assert trace[1][2][3] is True  # its worker-mate is lost with the worker
        assert trace[2][1] == ("21:3", 3.0, True, False) and trace[2][3] == ("41:3", 3.0, True, False)
        assert pool.restarts == 1 and [w.restarts for w in pool._workers] == [1, 0]
        # the restarted worker serves the next rollout normally
        _, again = _play(pool, [1, 2, 4, 6], 3)
        assert all(not err for step in again for (_, _, _, err) in step.values())
    finally:
        pool.close()


def test_reset_failure_is_marked_in_both_modes():
    for n_workers in (0, 2):
        pool = EnvPool(FAULTY, {"fail_on_reset": True}, n_workers=n_workers)
        try:
            starts = pool.reset([1, 3, 4])
            assert [err for _, _, err in starts] == [False, True, False]
            assert starts[1][1]["task_type"] == "unknown"
            out = pool.step({0: "x", 2: "x"})
            assert not out[0][1] and not out[2][1]
        finally:
            pool.close()


def test_close_stops_workers():
    pool = EnvPool(FAULTY, {}, n_workers=2)
    pool.reset([1, 2])
    pids = pool.worker_pids()
    pool.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            for _ in range(50):
                os.kill(pid, 0)
                time.sleep(0.1)


def test_unknown_env_names_are_clear():
    with pytest.raises(KeyError, match="valid envs"):
        EnvPool("nope")
    with pytest.raises(ImportError, match="no attribute"):
        EnvPool("faulty_env:Missing")


@pytest.mark.parametrize("n_workers", [0, 2])
def test_call_runs_a_function_on_each_env_where_it_lives(n_workers):
    """EnvPool.call (the DAgger labeller): the function sees each slot's env in its current state, in
    the process that holds it; a failing function or a bad path is reported and loses nothing."""
    pool = EnvPool(FAULTY, {"length": 3}, n_workers=n_workers)
    try:
        pool.reset([1, 2, 4])
        pool.step({0: "go", 2: "go"})
        out = pool.call("faulty_env:where", [0, 1, 2])
        states = {s: v.split("@") for s, (v, err) in out.items() if not err}
        assert {s: st for s, (st, _) in states.items()} == {0: "1:1", 1: "2:0", 2: "4:1"}
        pids = {s: int(pid) for s, (_, pid) in states.items()}
        if n_workers:  # slot s lives in worker s % 2
            assert pids[0] == pids[2] != pids[1] and set(pids.values()) == set(pool.worker_pids())
        else:
            assert set(pids.values()) == {os.getpid()}
        assert all(err == "" for _, err in out.values())
        failed = pool.call("faulty_env:broken", [0, 1])
        assert failed[0][0] is None and "ValueError: no answer for 1" in failed[0][1]
        assert "no answer for 2" in failed[1][1]
        bad = pool.call("faulty_env", [2])
        assert bad[2][0] is None and "not a 'package.module:function' path" in bad[2][1]
        # nothing was lost: every slot steps on, and the errors counter counts env failures only
        after = pool.step({0: "go", 1: "go", 2: "go"})
        assert [(r.observation, err) for r, err in after.values()] == [("1:2", False), ("2:1", False), ("4:2", False)]
        assert pool.errors == 0 and pool.restarts == 0
    finally:
        pool.close()


def _play_begun(pool: EnvPool, seeds, steps: int):
    """As :func:`_play`, each step begun with ``step_begin`` (two halves, a slot at a time: results
    come back as they arrive) and collected with ``step_ready``."""
    starts = pool.reset(seeds)
    live = {i for i, (_, _, err) in enumerate(starts) if not err}
    trace = []
    for k in range(steps):
        order = sorted(live)
        pool.step_begin({s: f"a{k}" for s in order[::2]})
        pool.step_begin({s: f"a{k}" for s in order[1::2]})
        assert pool.steps_pending == len(order)
        out = {}
        while pool.steps_pending:
            out.update(pool.step_ready(timeout=5.0))
        trace.append({s: (r.observation, r.reward, r.done, err) for s, (r, err) in sorted(out.items())})
        live = {s for s, (r, err) in out.items() if not err and not r.done}
    return starts, trace


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n_workers", [0, 2])
def test_begun_steps_equal_steps(n_workers):
    """step_begin + step_ready give step's results, in workers or in this process; while steps
    are begun the pool refuses other commands rather than mix their replies up."""
    seeds = [10, 11, 12, 14, 16]
    ref = _play(EnvPool("sokoban", {"dim_room": [6, 6], "num_boxes": 1}), seeds, 3)
    pool = EnvPool("sokoban", {"dim_room": [6, 6], "num_boxes": 1}, n_workers=n_workers)
    try:
        assert _play_begun(pool, seeds, 3) == ref
        if n_workers:
            pool.reset(seeds)
            pool.step_begin({0: "up"})
            with pytest.raises(RuntimeError, match="while begun steps are not collected"):
                pool.step({1: "up"})
            pool.close_slots()  # waits for the begun step and drops it
            assert pool.steps_pending == 0 and pool.reset(seeds)[0][0] == ref[0][0][0]
    finally:
        pool.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [3, 7, 8])  # 3: the env raises; 7: its worker dies; 8: it hangs past SIGALRM
def test_begun_steps_lose_only_what_failed(seed):
    pool = EnvPool(FAULTY, {"length": 3}, n_workers=2, step_timeout=1.0, worker_grace=1.0)
    try:
        _, trace = _play_begun(pool, [seed, 21, 31, 41], 3)
        assert trace[1][0][3] is True  # the failing slot, at its second step
        assert trace[2][1] == ("21:3", 3.0, True, False) and trace[2][3] == ("41:3", 3.0, True, False)
        if seed == 3:
            assert pool.restarts == 0 and trace[2][2] == ("31:3", 3.0, True, False)
        else:  # the worker is restarted; its other slot is lost with it
            assert pool.restarts == 1 and trace[1][2][3] is True
    finally:
        pool.close()


@pytest.mark.timeout(120)
def test_a_worker_dead_between_steps_loses_its_slots_at_their_steps():
    """A worker that died while idle (an OOM kill between steps): a begun step on it comes back as
    an error for that slot alone; its other slots say they are lost when they step; the other
    worker's slots play on."""
    pool = EnvPool(FAULTY, {"length": 3}, n_workers=2, step_timeout=1.0, worker_grace=1.0)
    try:
        pool.reset([1, 21, 31, 41])  # slots 0 and 2 live in worker 0
        pool._workers[0].proc.kill()
        pool._workers[0].proc.join()
        pool.step_begin({0: "go", 1: "go"})
        out = {}
        while pool.steps_pending:
            out.update(pool.step_ready(timeout=5.0))
        assert sorted(out) == [0, 1] and out[0][1] is True and out[1] == (out[1][0], False)
        assert pool.restarts == 1 and pool.errors == 1
        later = pool.step({2: "go", 3: "go"})
        assert later[2][1] is True and later[3][1] is False
    finally:
        pool.close()
