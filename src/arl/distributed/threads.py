"""Torch CPU threads per process: the machine's cores shared among the ARL processes using them.

torch starts one intra-op thread per core in every process. Where several processes share the
cores (two runs of a grid side by side, DDP ranks on a CPU, a run beside the tests) the threads
oversubscribe them and OpenMP's barriers spin against each other: on a 2-core machine two smoke
runs side by side took 3.4x as long with torch's default threads as with one thread each, and a
behaviour-cloning epoch 29.2 s instead of 2.8 s (docs/performance.md).

``threads: auto`` (the default of ``train.yaml`` and ``eval.yaml``) gives each ARL process
``cores // n`` threads, where ``n`` counts the live ARL processes of this user on the machine
(every entry point registers itself in a small folder of pid files, removed at exit). The
count is looked at again during the run (:func:`rebalance`, called before every rollout and every
training batch, at most every few seconds), so a run that started alone gives up its second
thread when a second run starts, and takes it back when that one ends. ``threads: <n>`` fixes
the count; an ``OMP_NUM_THREADS`` set in the environment wins over ``auto`` (the user forced it).

Only this module touches ``torch.set_num_threads`` in the training path; call
:func:`configure_threads` first thing in an entry point, before any torch work.
"""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

RECHECK_SECONDS = 5.0  # rebalance() looks at the registry at most this often


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where unknown)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def forced_threads() -> int | None:
    """``OMP_NUM_THREADS`` from the environment when it is a positive integer, else None."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def parse_setting(setting: int | str | None) -> int | None:
    """``auto`` (or None) -> None; a positive integer (or its string) -> that integer.

    Raises ``ValueError`` naming the valid choices for anything else.
    """
    if setting is None or (isinstance(setting, str) and setting.strip().lower() == "auto"):
        return None
    try:
        n = int(setting)
    except (TypeError, ValueError):
        n = 0
    if isinstance(setting, bool) or n < 1 or str(n) != str(setting).strip():
        raise ValueError(f"threads={setting!r} is not valid; valid: auto, or a positive integer")
    return n


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/<pid>/stat): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _paused(pid: int) -> bool:
    """Whether ``pid`` is stopped (``kill -STOP``, state T or t in /proc/<pid>/stat): it uses no core."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("T", "t")


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _start_time(pid)
    return now is None or not started or now == started


class ThreadRegistry:
    """A folder of ``<pid>`` files, one per live ARL process; stale files are removed on sight."""

    def __init__(self, folder: str | Path | None = None):
        default = Path(tempfile.gettempdir()) / f"arl-threads-{os.getuid() if hasattr(os, 'getuid') else 0}"
        self.folder = Path(folder) if folder is not None else default
        self.pid = os.getpid()

    @property
    def path(self) -> Path:
        return self.folder / str(self.pid)

    def register(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path.write_text(_start_time(self.pid) or "")
        except OSError as err:  # a read-only tmp: count this process alone
            log.debug("thread registry unavailable (%s)", err)

    def unregister(self) -> None:
        if os.getpid() != self.pid:  # a forked child must not remove its parent's entry
            return
        try:
            self.path.unlink()
        except OSError:
            pass

    def live(self) -> int:
        """Live registered processes that are not paused (at least 1: this one).

        A paused process (``kill -STOP``, as when a study is held while the tests run) keeps its
        entry but leaves its cores to the others until it is continued.
        """
        n = 0
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return 1
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                started = entry.read_text().strip()
            except OSError:
                continue
            if pid == self.pid:
                n += 1
            elif _alive(pid, started):
                n += 0 if _paused(pid) else 1
            else:
                try:
                    entry.unlink()
                except OSError:
                    pass
        return max(n, 1)


def share(cores: int, processes: int) -> int:
    """Threads for one of ``processes`` processes sharing ``cores`` cores: ``max(1, cores // processes)``."""
    return max(1, int(cores) // max(int(processes), 1))


class ThreadBudget:
    """The thread count of this process: fixed, forced by the environment, or a share of the cores."""

    def __init__(self, setting: int | str | None = "auto", registry: ThreadRegistry | None = None):
        self.fixed = parse_setting(setting)
        self.forced = forced_threads() if self.fixed is None else None
        self.registry = registry if registry is not None else ThreadRegistry()
        self.cores = usable_cores()
        self.threads: int | None = None
        self._checked = 0.0
        self.registry.register()  # a fixed or forced process still uses the cores others share

    @property
    def automatic(self) -> bool:
        return self.fixed is None and self.forced is None

    def wanted(self) -> int:
        if self.fixed is not None:
            return self.fixed
        if self.forced is not None:
            return self.forced
        return share(self.cores, self.registry.live())

    def apply(self) -> int:
        """Set torch's intra-op threads to :meth:`wanted` (when it changed); returns the count."""
        import torch  # heavy: configure_threads runs before torch is imported

        n = self.wanted()
        self._checked = time.monotonic()
        if n != self.threads:
            if self.threads is not None:
                log.info("torch threads %d -> %d (ARL processes sharing %d cores)", self.threads, n, self.cores)
            torch.set_num_threads(n)
            self.threads = n
        return n

    def rebalance(self, min_interval: float = RECHECK_SECONDS) -> int | None:
        if not self.automatic:
            return self.threads
        if time.monotonic() - self._checked < min_interval:
            return self.threads
        return self.apply()

    def close(self) -> None:
        self.registry.unregister()


_BUDGET: ThreadBudget | None = None


def configure_threads(setting: int | str | None = "auto", registry: ThreadRegistry | None = None) -> int:
    """Register this process and set its torch threads (call before any torch work); returns the count."""
    global _BUDGET
    if _BUDGET is not None:
        _BUDGET.close()
    _BUDGET = ThreadBudget(setting, registry)
    atexit.register(_BUDGET.close)
    return _BUDGET.apply()


def rebalance(min_interval: float = RECHECK_SECONDS) -> int | None:
    """Re-share the cores if other ARL processes started or ended (no-op before :func:`configure_threads`)."""
    return _BUDGET.rebalance(min_interval) if _BUDGET is not None else None


def current_budget() -> ThreadBudget | None:
    return _BUDGET
