"""EnvPool: the environment slots of one rollout, in this process or in worker subprocesses.

The agent loop talks to environments only through this pool: :meth:`EnvPool.reset` opens one slot
per episode, :meth:`EnvPool.step` advances a set of slots. Slot ``s`` lives in worker
``s % n_workers``; every worker steps its slots while the others step theirs.

Failures never stop a rollout. An environment that raises, or runs past ``step_timeout`` (a
``SIGALRM`` inside the worker interrupts Python code), loses its slot: the result comes back with
``env_error=True``, the episode is marked and excluded from the update, the worker goes on. A
worker that dies (segfault, ``os._exit``, OOM kill) or stays silent past its deadline (a hang in C
code that no signal interrupts) is killed and restarted; every slot it held is lost and reported
as an error, and the slots of the other workers finish normally.

:meth:`EnvPool.call` runs a function on the environments of some slots where they live (the
experts that label the states a policy reached, for DAgger); its failure loses nothing.

:meth:`EnvPool.step_begin` and :meth:`EnvPool.step_ready` split a step in two, so that the caller
works (the per-episode agent loop decodes) while the workers step: ``step_begin`` sends the
actions and returns at once, ``step_ready`` hands back the results that have arrived. Failures,
deadlines and lost workers are handled as in :meth:`EnvPool.step`. Without workers ``step_begin``
steps at once and ``step_ready`` returns those results.

``n_workers=0`` keeps the environments in this process (no isolation, no timeout; the fastest for
pure-Python envs such as Sokoban). Results depend only on the slots' seeds and actions, never on
the number of workers.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import signal
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from arl.envs.base import EnvSpec, StepResult
from arl.envs.registry import env_class, env_path

log = logging.getLogger(__name__)

START_INFO = {"task": "", "task_type": "unknown", "admissible_actions": None, "won": False, "score": 0.0, "anchor": ""}


class EnvTimeout(BaseException):
    """An environment call ran past the pool's ``step_timeout``.

    A ``BaseException``, as ``KeyboardInterrupt`` is: it interrupts the env's code wherever that was,
    so an env's (or an adapter's) own ``except Exception`` must not take it for a rejected action and
    play on from a state the interrupted step already changed; it reaches the pool, which fails the
    episode (``env_error``).
    """


def _failed_step() -> StepResult:
    return StepResult("", 0.0, True, {"won": False})


# --------------------------------------------------------------------------- one slot's calls
def _call_with_timeout(fn, timeout: float | None):
    """Run ``fn()``; raise :class:`EnvTimeout` after ``timeout`` seconds (main thread only)."""
    if not timeout or timeout <= 0:
        return fn()

    def _alarm(signum, frame):  # pragma: no cover - fires inside env code
        raise EnvTimeout(f"env call exceeded {timeout:.1f}s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Slots:
    """The environments of one process (a worker, or the pool itself when ``n_workers=0``)."""

    def __init__(self, path: str, env_kwargs: dict[str, Any], timeout: float | None):
        self.cls = env_class(path)
        self.env_kwargs = env_kwargs
        self.timeout = timeout
        self.envs: dict[int, Any] = {}

    def _drop(self, slot: int) -> None:
        env = self.envs.pop(slot, None)
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001, S110 - closing a broken env is best effort
                pass

    def reset(self, items: Sequence[tuple[int, int]]) -> list[tuple[int, str, dict, str]]:
        """(slot, seed) -> (slot, observation, info, error text or "")."""
        out = []
        for slot, seed in items:
            self._drop(slot)
            try:
                env = self.cls(**self.env_kwargs)
                self.envs[slot] = env
                obs, info = _call_with_timeout(lambda env=env, seed=seed: env.reset(int(seed)), self.timeout)
                out.append((slot, obs, info, ""))
            except BaseException as exc:  # any env failure loses only this slot
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self._drop(slot)
                out.append((slot, "", dict(START_INFO), _describe(exc, f"reset(seed={seed})")))
        return out

    def step(self, items: Sequence[tuple[int, str]]) -> list[tuple[int, StepResult, str]]:
        """(slot, action) -> (slot, result, error text or "")."""
        out = []
        for slot, action in items:
            env = self.envs.get(slot)
            if env is None:
                out.append((slot, _failed_step(), f"slot {slot} has no environment (lost earlier)"))
                continue
            try:
                result = _call_with_timeout(lambda env=env, action=action: env.step(action), self.timeout)
                out.append((slot, result, ""))
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self._drop(slot)
                out.append((slot, _failed_step(), _describe(exc, "step")))
        return out

    def call(self, items: Sequence[tuple[int, str]]) -> list[tuple[int, Any, str]]:
        """(slot, ``"module:function"``) -> (slot, ``function(env)``, error text or "").

        A failing call loses nothing: the env stays open (an expert reads the game, it does not
        play it).
        """
        out = []
        for slot, fn_path in items:
            env = self.envs.get(slot)
            if env is None:
                out.append((slot, None, f"slot {slot} has no environment (lost earlier)"))
                continue
            try:
                fn = _import_function(fn_path)
                out.append((slot, _call_with_timeout(lambda fn=fn, env=env: fn(env), self.timeout), ""))
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                out.append((slot, None, _describe(exc, fn_path)))
        return out

    def close(self, slots: Sequence[int] | None = None) -> None:
        for slot in list(self.envs if slots is None else slots):
            self._drop(slot)


def _import_function(fn_path: str):
    """The function named ``"package.module:function"``."""
    module, sep, attr = fn_path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{fn_path!r} is not a 'package.module:function' path")
    return getattr(importlib.import_module(module), attr)


def _describe(exc: BaseException, what: str) -> str:
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return f"{what}: {last}"


def _worker_main(conn: Connection, path: str, env_kwargs: dict[str, Any], timeout: float | None) -> None:
    """A worker process: serve ``reset``/``step``/``close`` commands until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    slots = _Slots(path, env_kwargs, timeout)
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, OSError):
            break
        if cmd == "reset":
            conn.send(slots.reset(payload))
        elif cmd == "step":
            conn.send(slots.step(payload))
        elif cmd == "call":
            conn.send(slots.call(payload))
        elif cmd == "close_slots":
            slots.close(payload)
            conn.send(None)
        elif cmd == "stop":
            slots.close()
            conn.send(None)
            break
    conn.close()


class _Worker:
    """Parent-side handle of one worker process."""

    def __init__(self, ctx, index: int, path: str, env_kwargs: dict[str, Any], timeout: float | None):
        self.ctx, self.index, self.path, self.env_kwargs, self.timeout = ctx, index, path, env_kwargs, timeout
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(
            target=_worker_main, args=(child, self.path, self.env_kwargs, self.timeout),
            name=f"arl-env-{self.index}", daemon=True,
        )
        self.proc.start()
        child.close()

    def restart(self) -> None:
        self.kill()
        self.restarts += 1
        self._start()

    def kill(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=5)

    def stop(self) -> None:
        try:
            self.conn.send(("stop", None))
            if self.conn.poll(5):
                self.conn.recv()
        except (OSError, EOFError, BrokenPipeError):
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


class EnvPool:
    """Environment slots for rollouts.

    Args:
        env_name: a registered env name, or ``"package.module:Class"`` of any env class.
        env_kwargs: keyword arguments of the env class.
        n_workers: worker subprocesses; 0 runs the environments in this process.
        step_timeout: seconds one ``reset`` or ``step`` of one env may take (workers only); the
            worker's whole reply must come within ``step_timeout * slots + 10`` seconds, else the
            worker is killed and restarted.
        start_method: multiprocessing start method of the workers (``forkserver``, ``spawn``,
            ``fork``).
        worker_grace: seconds added to a worker's deadline on top of its slots' timeouts.
    """

    def __init__(
        self,
        env_name: str,
        env_kwargs: dict[str, Any] | None = None,
        n_workers: int = 0,
        step_timeout: float = 60.0,
        start_method: str = "forkserver",
        worker_grace: float = 10.0,
    ):
        if n_workers < 0:
            raise ValueError(f"n_workers must be >= 0, got {n_workers}")
        self.env_name = env_name
        self.env_kwargs = dict(env_kwargs or {})
        self.n_workers = int(n_workers)
        self.step_timeout = float(step_timeout) if step_timeout else None
        self.path = env_path(env_name)
        probe = env_class(self.path)(**self.env_kwargs)
        self.spec: EnvSpec = probe.spec
        try:
            probe.close()
        except Exception:  # noqa: BLE001, S110 - the probe only read the spec: closing it is best effort
            pass
        self.errors = 0  # slots lost to env errors, timeouts and worker deaths (cumulative)
        self._local = _Slots(self.path, self.env_kwargs, None) if self.n_workers == 0 else None
        self._workers: list[_Worker] = []
        self._start_method = start_method
        self._open: set[int] = set()
        self.worker_grace = float(worker_grace)
        # begun steps not yet collected: per worker index, (slots, deadline) in the order they were sent
        self._begun: dict[int, list[tuple[list[int], float]]] = {}
        self._ready: dict[int, tuple[StepResult, bool]] = {}  # collected results not yet handed back

    # ------------------------------------------------------------------ workers
    def _ensure_workers(self) -> None:
        if self.n_workers and not self._workers:
            ctx = mp.get_context(self._start_method)
            self._workers = [
                _Worker(ctx, i, self.path, self.env_kwargs, self.step_timeout) for i in range(self.n_workers)
            ]

    @property
    def restarts(self) -> int:
        """Worker processes restarted so far."""
        return sum(w.restarts for w in self._workers)

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def _dispatch(self, cmd: str, items: Sequence[tuple[int, Any]]) -> dict[int, tuple[Any, ...] | None]:
        """Send each worker its share of ``items``; collect replies. Lost slots map to None."""
        self._ensure_workers()
        if any(self._begun.values()):
            raise RuntimeError(f"EnvPool.{cmd} while begun steps are not collected (step_ready)")
        shares: dict[int, list[tuple[int, Any]]] = {}
        for slot, value in items:
            shares.setdefault(slot % self.n_workers, []).append((slot, value))
        pending: dict[Connection, tuple[_Worker, list]] = {}
        deadline: dict[Connection, float] = {}
        now = time.monotonic()
        out: dict[int, tuple[Any, ...] | None] = {}
        for w_idx, share in shares.items():
            worker = self._workers[w_idx]
            try:
                worker.conn.send((cmd, share))
            except (OSError, BrokenPipeError):
                self._lose_worker(worker, share, out, "worker pipe broken")
                continue
            pending[worker.conn] = (worker, share)
            deadline[worker.conn] = now + (self.step_timeout or 60.0) * len(share) + self.worker_grace
        while pending:
            timeout = max(0.0, min(deadline.values()) - time.monotonic())
            ready = wait(list(pending), timeout=timeout)
            for conn in ready:
                worker, share = pending.pop(conn)
                deadline.pop(conn)
                try:
                    for reply in conn.recv():
                        out[reply[0]] = reply[1:]
                except (EOFError, OSError):
                    self._lose_worker(worker, share, out, f"worker died (exit code {worker.proc.exitcode})")
            late = [c for c in pending if time.monotonic() >= deadline[c]]
            for conn in late:
                worker, share = pending.pop(conn)
                deadline.pop(conn)
                self._lose_worker(worker, share, out, "worker did not answer before its deadline")
        return out

    def _run(self, cmd: str, items: Sequence[tuple[int, Any]]) -> dict[int, tuple[Any, ...] | None]:
        """``cmd`` (``reset``, ``step``, ``call``) on the slots of ``items``: slot -> reply tail."""
        if self._local is not None:
            return {r[0]: r[1:] for r in getattr(self._local, cmd)(items)}
        return self._dispatch(cmd, items)

    def _lose_worker(self, worker: _Worker, share: list, out: dict, why: str) -> None:
        """Restart ``worker``; every slot it held is lost (those of its begun steps too)."""
        begun = [s for slots, _ in self._begun.pop(worker.index, []) for s in slots]
        held = sorted({s for s in self._open if s % self.n_workers == worker.index} | {s for s, _ in share} | set(begun))
        log.warning("env worker %d (%s): %s; restarting it, %d slot(s) lost", worker.index, self.env_name, why, len(held))
        worker.restart()
        for slot in held:
            out[slot] = None
        self._open.difference_update(held)

    # ------------------------------------------------------------------ the pool API
    def reset(self, seeds: Sequence[int]) -> list[tuple[str, dict[str, Any], bool]]:
        """Open one slot per seed (slot ``i`` gets ``seeds[i]``); (observation, info, env_error) per slot."""
        self.close_slots()
        items = list(enumerate(int(s) for s in seeds))
        replies = self._run("reset", items)
        out = []
        for slot, _ in items:
            reply = replies.get(slot)
            if reply is None:
                reply = ("", dict(START_INFO), "worker lost")
            obs, info, err = reply
            if err:
                self.errors += 1
                log.warning("env %s slot %d: %s", self.env_name, slot, err)
            else:
                self._open.add(slot)
            out.append((obs, info, bool(err)))
        return out

    def step(self, actions: dict[int, str]) -> dict[int, tuple[StepResult, bool]]:
        """Step the given slots; returns slot -> (result, env_error). A failed slot is closed."""
        items = sorted(actions.items())
        replies = self._run("step", items)
        return {slot: self._step_result(slot, replies.get(slot)) for slot, _ in items}

    def _step_result(self, slot: int, reply: tuple | None) -> tuple[StepResult, bool]:
        """(result, env_error) of one slot's step reply (None: its worker was lost); a failed slot is closed."""
        result, err = (_failed_step(), "worker lost") if reply is None else reply
        if err:
            self.errors += 1
            self._open.discard(slot)
            log.warning("env %s slot %d: %s", self.env_name, slot, err)
        return result, bool(err)

    @property
    def steps_pending(self) -> int:
        """Slots whose begun step has not been handed back by :meth:`step_ready`."""
        return sum(len(slots) for queue in self._begun.values() for slots, _ in queue) + len(self._ready)

    def step_begin(self, actions: dict[int, str]) -> None:
        """Start stepping the given slots (see the module docstring); collect with :meth:`step_ready`."""
        if not actions:
            return
        if self._local is not None:
            self._ready.update(self.step(actions))
            return
        self._ensure_workers()
        shares: dict[int, list[tuple[int, str]]] = {}
        for slot, action in sorted(actions.items()):
            shares.setdefault(slot % self.n_workers, []).append((slot, action))
        now = time.monotonic()
        for w_idx, share in shares.items():
            worker = self._workers[w_idx]
            queue = self._begun.setdefault(w_idx, [])
            # a worker answers its commands in order: this one's deadline counts the steps queued before it
            start = queue[-1][1] if queue else now
            deadline = max(start, now) + (self.step_timeout or 60.0) * len(share) + self.worker_grace
            try:
                worker.conn.send(("step", share))
            except (OSError, BrokenPipeError):
                self._lose_begun(worker, "worker pipe broken", share)
                continue
            queue.append(([slot for slot, _ in share], deadline))

    def step_ready(self, timeout: float = 0.0) -> dict[int, tuple[StepResult, bool]]:
        """The results of begun steps that have arrived: slot -> (result, env_error); waits up to
        ``timeout`` seconds for the first when none has. A worker past its deadline is restarted
        and the slots of its begun steps come back as errors (its other slots are lost too and
        say so at their next step)."""
        pending = {w: queue for w, queue in self._begun.items() if queue}
        if not self._ready and pending and timeout > 0:
            first_deadline = min(queue[0][1] for queue in pending.values())
            wait([self._workers[w].conn for w in pending], timeout=max(0.0, min(timeout, first_deadline - time.monotonic())))
        for w_idx, queue in list(pending.items()):
            worker = self._workers[w_idx]
            try:
                while queue and worker.conn.poll(0):
                    replies = worker.conn.recv()
                    queue.pop(0)
                    for reply in replies:
                        self._ready[reply[0]] = self._step_result(reply[0], reply[1:])
            except (EOFError, OSError):
                self._lose_begun(worker, f"worker died (exit code {worker.proc.exitcode})")
                continue
            if queue and time.monotonic() >= queue[0][1]:
                self._lose_begun(worker, "worker did not answer before its deadline")
            elif not queue:
                self._begun.pop(w_idx, None)
        ready, self._ready = self._ready, {}
        return ready

    def _lose_begun(self, worker: _Worker, why: str, share: Sequence[tuple[int, str]] = ()) -> None:
        """Restart ``worker``; the slots of its begun steps (and of ``share``, a step it could not be
        sent) come back as errors; its other slots are lost too and say so at their next step."""
        begun = [slot for slots, _ in self._begun.get(worker.index, []) for slot in slots] + [s for s, _ in share]
        self._lose_worker(worker, list(share), {}, why)
        self._ready.update({slot: self._step_result(slot, None) for slot in begun})

    def _drain_begun(self) -> None:
        """Wait for every begun step and drop the results (a rollout that stopped early must not
        leave replies in the pipes for the next command)."""
        while any(self._begun.values()):
            self.step_ready(timeout=1.0)
        self._begun.clear()
        self._ready.clear()

    def call(self, fn_path: str, slots: Sequence[int]) -> dict[int, tuple[Any, str]]:
        """Run ``fn_path`` (``"package.module:function"``) on the env of each of ``slots``, where it
        lives; slot -> (value, error text or ""). A failing function loses nothing; a worker that
        dies or hangs during the call is restarted and its slots are lost, as during a step."""
        items = [(int(slot), fn_path) for slot in slots]
        replies = self._run("call", items)
        out = {}
        for slot, _ in items:
            reply = replies.get(slot)
            value, err = (None, "worker lost") if reply is None else reply
            if err:
                log.warning("env %s slot %d: %s", self.env_name, slot, err)
            out[slot] = (value, err)
        return out

    def close_slots(self) -> None:
        """Close every open slot (the workers stay up for the next rollout)."""
        self._drain_begun()
        if self._local is not None:
            self._local.close()
        elif self._workers and self._open:
            for worker in self._workers:
                try:
                    worker.conn.send(("close_slots", None))
                except (OSError, BrokenPipeError):
                    continue
            for worker in self._workers:
                try:
                    if worker.conn.poll(10):
                        worker.conn.recv()
                    else:
                        worker.restart()
                except (EOFError, OSError):
                    worker.restart()
        self._open.clear()

    def close(self) -> None:
        """Close all slots and stop the workers."""
        self.close_slots()
        for worker in self._workers:
            worker.stop()
        self._workers = []

    def __del__(self):  # pragma: no cover - best effort at interpreter exit
        try:
            for worker in self._workers:
                worker.kill()
        except Exception:  # noqa: BLE001, S110 - best effort at interpreter exit
            pass
