"""The real ALFWorld text engine (TextWorld ``PddlEnv`` + alfworld's wrappers), imported lazily.

``import alfworld`` has two side effects this module undoes or contains:

* ``alfworld.info`` sets ``os.environ["ALFWORLD_DATA"]`` to ``~/.cache/alfworld`` when it is
  unset. :func:`require_alfworld` restores the variable, so "is ``$ALFWORLD_DATA`` set?" keeps
  meaning what the user did (see :mod:`arl.envs.alfworld.data`).
* fast-downward's PDDL translator (run by every ``load`` and ``reset`` of a game) overwrites
  ``sys.argv``; :class:`GameEngine` restores it after each call.

A :class:`GameEngine` plays one ``game.tw-pddl`` file exactly as ``AlfredTWEnv`` does: ``PddlEnv``
wrapped in ``AlfredDemangler`` (object names ``mug 1``, ``countertop 2``; never shuffled) and
``AlfredInfos``. Each ``PddlEnv`` loads its own copy of fast-downward's shared library (the library
holds the game state): ``fast_downward.load_lib`` copies the 33 MB ``libdownward.so`` into a temporary
folder, loads it and deletes the folder, and the copy cannot be unloaded (:meth:`GameEngine.close`),
so its disk space stays taken until the process ends. Engines are therefore recycled through a
per-process free list (:func:`acquire_engine` / :func:`release_engine`) that keeps every released
engine: a process holds as many library copies as it ever ran episodes at once, never one per
episode.

Speed-ups (:func:`install_speedups`, on by default). TextWorld's text grammar re-parses the same
few dozen template strings with TatSu, and deep-copies its derivation contexts, for every
admissible command of every step; fast-downward re-translates the PDDL problem on every ``load``
and every ``reset``. Four changes remove that repeated work without changing any result:

* the TatSu parse of a grammar string is memoised (a fresh deep copy is returned each time, since
  a derivation mutates the symbols);
* the parse of a conjunctive query is memoised (the rule is only read);
* the PDDL -> SAS translation of a (domain, problem) pair is memoised (the task is only read),
  in memory and on disk under ``$ARL_CACHE/alfworld-sas`` (zlib-compressed pickles keyed by a
  hash of the translator version and both texts), so a game is translated once per machine rather
  than twice per ``load`` and twice per ``reset`` (``ARL_ALFWORLD_SAS_CACHE=0``: memory only);
* a derivation context's ``variables`` / ``mapping`` dicts are copied shallowly instead of deeply
  (their values, entity infos and logic variables, are only read during a derivation).

A test plays the same game with and without them and compares every observation, admissible list
and outcome. ``ARL_ALFWORLD_SPEEDUPS=0`` turns them off.
"""

from __future__ import annotations

import copy
import hashlib
import os
import pickle
import sys
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install 'arl[alfworld]'  (or: pip install alfworld)"

_IMPORT_LOCK = threading.Lock()
_MODULES: dict[str, Any] = {}


def require_alfworld() -> dict[str, Any]:
    """Import ``alfworld`` and ``textworld`` lazily; the modules the adapter uses, by short name.

    Raises ``ImportError`` naming the install command when the extra is missing. Restores
    ``$ALFWORLD_DATA`` to its value before the import (``alfworld.info`` sets a default).
    """
    with _IMPORT_LOCK:
        if _MODULES:
            return _MODULES
        had = "ALFWORLD_DATA" in os.environ
        before = os.environ.get("ALFWORLD_DATA")
        try:
            # optional: the alfworld extra (alfworld, textworld, fast-downward)
            import fast_downward
            import textworld
            import textworld.envs.pddl
            import textworld.envs.pddl.logic as pddl_logic
            import textworld.logic as tw_logic
            from alfworld.agents.environment import alfred_tw_env
            from alfworld.agents.expert import handcoded_expert, handcoded_expert_tw
            from alfworld.gen import constants, goal_library
            from textworld.envs.pddl import textgen
        except ImportError as exc:
            raise ImportError(
                f"the alfworld environment needs the `alfworld` package (TextWorld + fast-downward): "
                f"{INSTALL_HINT}. Import failed with: {exc}"
            ) from exc
        finally:
            if had:
                os.environ["ALFWORLD_DATA"] = before  # type: ignore[assignment]
            else:
                os.environ.pop("ALFWORLD_DATA", None)
        _MODULES.update(
            textworld=textworld,
            fast_downward=fast_downward,
            PddlEnv=textworld.envs.pddl.PddlEnv,
            alfred_tw_env=alfred_tw_env,
            handcoded_expert=handcoded_expert,
            HandCodedTWAgent=handcoded_expert_tw.HandCodedTWAgent,
            constants=constants,
            goal_library=goal_library,
            textgen=textgen,
            tw_logic=tw_logic,
            pddl_logic=pddl_logic,
        )
        return _MODULES


def alfworld_available() -> bool:
    """Whether the alfworld extra can be imported (never raises)."""
    try:
        require_alfworld()
        return True
    except ImportError:
        return False


class _KeepArgv:
    """Context manager restoring ``sys.argv`` (fast-downward's translator overwrites it)."""

    def __enter__(self):
        self.argv = list(sys.argv)
        return self

    def __exit__(self, *exc):
        sys.argv[:] = self.argv
        return False


@dataclass
class EngineState:
    """What one engine call returns (a plain copy of TextWorld's ``GameState`` fields we use)."""

    feedback: str
    admissible_commands: list[str]
    won: bool
    facts: list[Any] = field(default_factory=list)
    raw: Any = None  # the TextWorld GameState (for alfworld's handcoded expert)


class GameEngine:
    """One game of the real ALFWorld engine: ``PddlEnv`` + ``AlfredDemangler`` + ``AlfredInfos``."""

    def __init__(self, speedups: bool = True):
        mods = require_alfworld()
        if speedups:
            install_speedups()
        tw = mods["textworld"]
        infos = tw.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["gamefile"])
        atw = mods["alfred_tw_env"]
        with _KeepArgv():
            env = mods["PddlEnv"](infos)
        env = atw.AlfredDemangler(env, shuffle=False)
        self.env = atw.AlfredInfos(env)
        self.gamefile: str | None = None
        self.state: EngineState | None = None

    @property
    def pddl(self):
        """The unwrapped ``PddlEnv`` (planner access)."""
        return self.env.unwrapped

    def load(self, gamefile: str) -> None:
        """Parse ``gamefile`` (a ``game.tw-pddl``); a no-op when it is already loaded."""
        if gamefile == self.gamefile:
            return
        with _KeepArgv():
            self.env.load(gamefile)
        self.gamefile = gamefile

    def reset(self) -> EngineState:
        """Start the loaded game; the intro text is the feedback."""
        if self.gamefile is None:
            raise RuntimeError("load a game before reset")
        with _KeepArgv():
            gs = self.env.reset()
        self.state = self._wrap(gs)
        return self.state

    def step(self, command: str) -> EngineState:
        """Run one command (an inadmissible one answers ``Nothing happens.``)."""
        if self.state is None:
            raise RuntimeError("reset the engine before step")
        gs, _, _ = self.env.step(command)
        self.state = self._wrap(gs)
        return self.state

    def replan(self) -> list[str]:
        """fast-downward's plan from the current state to the goal, as commands ([] if none)."""
        pddl = self.pddl
        with _KeepArgv():
            return list(pddl._pddl_state.replan(pddl._entity_infos))

    def close(self) -> None:
        """Drop the game (the engine is unusable afterwards).

        fast-downward's private library copy is deliberately NOT unloaded (``close_lib``): after a
        ``dlclose`` of a copy that had solved a problem, the interpreter segfaults at exit (seen
        with the memoised translations: every test passed, then pytest exited with code 139). The
        library stays mapped until the process ends; engines are pooled (``release_engine``), so
        only engines beyond the free list are ever closed.
        """
        pddl = self.pddl
        if getattr(pddl, "downward_lib", None) is not None:
            pddl.downward_lib = None
        self.state = None

    @staticmethod
    def _wrap(gs) -> EngineState:
        return EngineState(
            feedback=str(gs["feedback"]),
            admissible_commands=list(gs["admissible_commands"]),
            won=bool(gs["won"]),
            facts=list(gs.get("facts") or []),
            raw=gs,
        )


# ------------------------------------------------------------------------------ speed-ups
_ORIGINALS: dict[str, Any] = {}
_SAS_MEMO: OrderedDict[tuple, Any] = OrderedDict()
SAS_MEMO_SIZE = 64
_SAS_LOCK = threading.Lock()


def _memo_parse(fn):
    memo: dict[tuple, Any] = {}

    def parse(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in memo:
            memo[key] = fn(*args, **kwargs)
        return copy.deepcopy(memo[key])

    return parse


def _memo_query(fn):
    memo: dict[str, Any] = {}

    def parse_conjunctive_query(cls, expr):
        if expr not in memo:
            memo[expr] = fn(cls, expr)
        return memo[expr]

    return classmethod(parse_conjunctive_query)


def _shallow_copy_context(context):
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def sas_cache_dir() -> Path | None:
    """Where translations are kept across processes: ``$ARL_CACHE/alfworld-sas`` (``~/.cache/arl``
    when unset); None when ``ARL_ALFWORLD_SAS_CACHE=0``."""
    if os.environ.get("ARL_ALFWORLD_SAS_CACHE", "1") in ("0", "false", "False", "no"):
        return None
    return Path(os.environ.get("ARL_CACHE") or Path.home() / ".cache" / "arl") / "alfworld-sas"


def _sas_format() -> str:
    """Part of the on-disk key: the translator's version (a new one never reads old entries)."""
    try:
        return f"fast_downward_textworld-{version('fast_downward_textworld')}/py{sys.version_info[0]}.{sys.version_info[1]}"
    except Exception:  # noqa: BLE001  # pragma: no cover - metadata missing
        return "fast_downward_textworld-unknown"


def _sas_file(folder: Path, domain: str, problem: str, optimize: bool) -> Path:
    digest = hashlib.sha256(f"{_sas_format()}\0{bool(optimize)}\0{domain}\0{problem}".encode()).hexdigest()
    return folder / digest[:2] / f"{digest}.pkl.z"


def _read_sas(path: Path):
    try:
        return pickle.loads(zlib.decompress(path.read_bytes()))
    except Exception:  # noqa: BLE001 - missing, partial or from another version: translate again
        return None


def _write_sas(path: Path, value) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
        part.write_bytes(zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1))
        os.replace(part, path)
    except Exception:  # noqa: BLE001, S110 - a read-only or full cache only costs speed
        pass


def _memo_pddl2sas(fn):
    def pddl2sas(domain, problem, verbose=False, optimize=False):
        if verbose:
            return fn(domain, problem, verbose=verbose, optimize=optimize)
        key = (domain, problem, bool(optimize))
        with _SAS_LOCK:
            hit = _SAS_MEMO.get(key)
            if hit is not None:
                _SAS_MEMO.move_to_end(key)
                return hit
        folder = sas_cache_dir()
        path = _sas_file(folder, domain, problem, optimize) if folder is not None else None
        out = _read_sas(path) if path is not None else None
        if out is None:
            with _KeepArgv():
                out = fn(domain, problem, verbose=verbose, optimize=optimize)
            if path is not None:
                _write_sas(path, out)
        with _SAS_LOCK:
            _SAS_MEMO[key] = out
            while len(_SAS_MEMO) > SAS_MEMO_SIZE:
                _SAS_MEMO.popitem(last=False)
        return out

    return pddl2sas


def speedups_installed() -> bool:
    """Whether :func:`install_speedups` is in effect."""
    return bool(_ORIGINALS)


def install_speedups() -> bool:
    """Install the memoisations described in the module docstring (idempotent).

    Returns whether they are in effect (false when ``ARL_ALFWORLD_SPEEDUPS=0`` or when the
    installed TextWorld lacks one of the functions they wrap).
    """
    if _ORIGINALS:
        return True
    if os.environ.get("ARL_ALFWORLD_SPEEDUPS", "1") in ("0", "false", "False", "no"):
        return False
    m = require_alfworld()
    fast_downward, pddl_logic, tw_logic, textgen = m["fast_downward"], m["pddl_logic"], m["tw_logic"], m["textgen"]
    targets = (
        (textgen, "_parse_and_convert"),
        (textgen, "copy_context"),
        (tw_logic.Rule, "parse_conjunctive_query"),
        (fast_downward, "pddl2sas"),
    )
    if (
        not all(hasattr(obj, name) for obj, name in targets)
        or getattr(pddl_logic, "fast_downward", None) is not fast_downward
    ):
        return False
    with _IMPORT_LOCK:
        _ORIGINALS.update(
            textgen_parse=textgen._parse_and_convert,
            copy_context=textgen.copy_context,
            query=tw_logic.Rule.__dict__["parse_conjunctive_query"],
            pddl2sas=fast_downward.pddl2sas,
        )
        textgen._parse_and_convert = _memo_parse(_ORIGINALS["textgen_parse"])
        textgen.copy_context = _shallow_copy_context
        tw_logic.Rule.parse_conjunctive_query = _memo_query(_ORIGINALS["query"].__func__)
        fast_downward.pddl2sas = _memo_pddl2sas(_ORIGINALS["pddl2sas"])
    return True


def uninstall_speedups() -> None:
    """Restore TextWorld's and fast-downward's own functions (tests compare both ways)."""
    if not _ORIGINALS:
        return
    m = require_alfworld()
    fast_downward, tw_logic, textgen = m["fast_downward"], m["tw_logic"], m["textgen"]
    with _IMPORT_LOCK:
        textgen._parse_and_convert = _ORIGINALS["textgen_parse"]
        textgen.copy_context = _ORIGINALS["copy_context"]
        tw_logic.Rule.parse_conjunctive_query = _ORIGINALS["query"]
        fast_downward.pddl2sas = _ORIGINALS["pddl2sas"]
        _ORIGINALS.clear()
        _SAS_MEMO.clear()


_FREE: list[GameEngine] = []
_FREE_LOCK = threading.Lock()
ENGINES_MADE = 0  # GameEngines this process has built (each a library copy that stays until it ends)


def acquire_engine(gamefile: str | None = None, speedups: bool = True) -> GameEngine:
    """A ready engine from this process's free list (one with ``gamefile`` loaded if any), or a new one."""
    with _FREE_LOCK:
        if _FREE:
            for i, engine in enumerate(_FREE):
                if gamefile is not None and engine.gamefile == gamefile:
                    return _FREE.pop(i)
            return _FREE.pop()
    global ENGINES_MADE
    ENGINES_MADE += 1
    return GameEngine(speedups=speedups)


def release_engine(engine: GameEngine) -> None:
    """Give ``engine`` back for reuse by a later episode. Every released engine is kept: closing one
    would not free its library copy (:meth:`GameEngine.close`), and an engine dropped here would be
    replaced by a new copy at the next episode, 33 MB of disk each (a capped list once filled the
    disk: a 12-iteration ALFWorld run of 4 x 8 episodes and 96-game validations made about 570 copies, 19 GB)."""
    engine.state = None
    with _FREE_LOCK:
        _FREE.append(engine)
