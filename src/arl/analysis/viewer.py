"""The episode viewer: every validation episode under a folder as one self-contained HTML page.

``python src/view.py <folder>`` finds the validation files below ``<folder>`` (a training run's
``val_episodes/iter<k>.jsonl``, an eval run's ``val_episodes.jsonl``, a study archive's runs, or
one such file) and writes one HTML file that opens from disk, offline, with no server: the
episodes filtered by outcome, task type, validation iteration, run seed and run; each episode turn
by turn (the observation, the model's whole response with its thinking greyed, the parsed action,
valid or why not, the reward, the GiGPO anchor key); and two validations on the same games side by
side (games gained and lost, McNemar's exact test, as ``src/compare.py`` counts them); and each
training run's validation curves, drawn by the page as inline SVG from the same episodes
(:func:`validation_curves`: the success rate, and the score where the env is graded, per validation
iteration, overall and per task type), the validation of the episode on screen marked on them. The
data sit in the page as JSON; the browser renders one page of the list and one episode at a time, so
thousands of episodes stay quick (``bench/viewer.py`` times it).

Files written before the turn logs (or archived without them, ``scripts/archive_runs.sh``) hold a
summary per episode; the page shows it and says the turns are missing.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from arl.analysis.runs import read_config
from arl.utils.episode_files import iteration_of

PAGE = Path(__file__).with_name("viewer_page.html")
EVAL_FILE = "val_episodes.jsonl"
_SEED_IN_NAME = re.compile(r"seed_?(\d+)(?!.*seed)")
# the envs whose EnvSpec grades an episode beyond winning it (``graded=True``: WebShop's purchase score), whose runs
# log ``val/score``; the page draws a score curve for the runs whose saved config plays one of them
GRADED_ENVS = frozenset({"webshop"})
SUMMARY_ONLY = ("this file holds episode summaries only (written before validation files kept the turns, or "
                "archived without them: scripts/archive_runs.sh); the run folder's own files have them")


@dataclass
class ValidationFile:
    """One validation's episode file: ``run`` (the run folder relative to the viewed folder),
    ``iteration`` (the RL iteration, None for an eval run), the run's ``seed`` and ``env`` (the env's
    registry name) when its saved config or folder name says them."""

    path: Path
    run: str
    iteration: int | None
    run_seed: int | None
    env: str | None = None

    @property
    def iteration_label(self) -> str:
        return "eval" if self.iteration is None else str(self.iteration)

    @property
    def label(self) -> str:
        return f"{self.run} @ " + ("eval" if self.iteration is None else f"iter {self.iteration}")


def _run_seed(run_dir: Path) -> int | None:
    """The run's ``seed`` from its ``.hydra/config.yaml``, else a ``seed<k>`` in its folder name."""
    config = run_dir / ".hydra" / "config.yaml"
    if config.exists():
        match = re.search(r"^seed:\s*(-?\d+)\s*$", config.read_text(), re.MULTILINE)
        if match:
            return int(match.group(1))
    match = _SEED_IN_NAME.search(run_dir.name)
    return int(match.group(1)) if match else None


def _run_env(run_dir: Path) -> str | None:
    """The ``env.name`` of the run's ``.hydra/config.yaml``; None without one (or with one YAML
    cannot read: the page then draws no score curve for the run)."""
    try:
        config = read_config(run_dir)
    except yaml.YAMLError:
        return None
    env = config.get("env") if isinstance(config, dict) else None
    name = env.get("name") if isinstance(env, dict) else None
    return str(name) if name is not None else None


def find_validations(root: Path) -> list[ValidationFile]:
    """The validation files under ``root`` (or ``root`` itself when it is one), ordered by run and
    iteration (an eval file last in its run)."""
    root = Path(root)
    if root.is_file():
        k = iteration_of(root)
        run_dir = root.parent.parent if k is not None else root.parent
        return [ValidationFile(root, run_dir.name or str(run_dir), k, _run_seed(run_dir), _run_env(run_dir))]
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist")
    found = []
    envs: dict[Path, str | None] = {}  # each run's config read once
    for path in root.rglob("*.jsonl"):
        k = iteration_of(path)
        if k is not None and path.parent.name == "val_episodes":
            run_dir = path.parent.parent
        elif path.name == EVAL_FILE:
            run_dir = path.parent
        else:
            continue
        if run_dir not in envs:
            envs[run_dir] = _run_env(run_dir)
        rel = run_dir.relative_to(root).as_posix()
        found.append(ValidationFile(path, root.resolve().name if rel == "." else rel, k, _run_seed(run_dir),
                                    envs[run_dir]))
    found.sort(key=lambda f: (f.run, f.iteration is None, f.iteration or 0))
    return found


def page_data(roots: Path | list[Path]) -> dict[str, Any]:
    """What the page of one folder or several shows: ``validations`` (run, iteration, run seed,
    label, the file relative to its folder, the env and whether it is graded, a note on what is
    missing), ``episodes`` (each row of each file, with ``v``, its validation's index) and
    ``curves`` (:func:`validation_curves` of the two). With several folders (two eval runs, say)
    each run is named after its folder too."""
    roots = [Path(r) for r in ([roots] if isinstance(roots, (str, Path)) else roots)]
    files: list[tuple[Path, ValidationFile]] = []
    for root in roots:
        found = find_validations(root)
        if not found:
            raise FileNotFoundError(
                f"no validation episodes under {root}: expected <run>/val_episodes/iter<k>.jsonl (training runs) or "
                f"<eval run>/{EVAL_FILE} (src/eval.py)"
            )
        for f in found:
            if len(roots) > 1 and root.is_dir() and f.run != root.resolve().name:
                f.run = f"{root.resolve().name}/{f.run}"
            files.append((root, f))
    validations, episodes, notes = [], [], []
    summary_only = 0
    for v, (root, f) in enumerate(files):
        rows = [json.loads(line) for line in f.path.read_text().splitlines() if line.strip()]
        has_turns = not rows or any(isinstance(r.get("turn_log"), list) or isinstance(r.get("turns"), list) for r in rows)
        summary_only += not has_turns
        validations.append({"key": f"{f.run}@{f.iteration_label}", "run": f.run, "iteration": f.iteration,
                            "iteration_label": f.iteration_label, "run_seed": f.run_seed, "label": f.label,
                            "file": f.path.relative_to(root).as_posix() if Path(root).is_dir() else f.path.name,
                            "env": f.env, "graded": f.env in GRADED_ENVS,
                            "missing": None if has_turns else SUMMARY_ONLY})
        for row in rows:
            episodes.append(_episode(row, v))
    if summary_only:
        notes.append(f"{summary_only} of {len(files)} validation files hold episode summaries only, no turns: "
                     + SUMMARY_ONLY + ".")
    return {"source": ", ".join(map(str, roots)), "validations": validations, "episodes": episodes, "notes": notes,
            "curves": validation_curves(validations, episodes)}


def _point(v: int, iteration: int, rows: list[dict[str, Any]], graded: bool) -> dict[str, Any]:
    """One validation's point of a curve from its ``rows`` (at least one): ``v``, ``iteration``,
    ``episodes``, ``won``, ``success`` (won / episodes) and ``score`` (100 x the mean final score;
    None unless ``graded``); an episode with an env error is a loss scoring 0, as ``val/*`` count it."""
    won = sum(bool(r["won"]) and not r.get("env_error") for r in rows)
    score = None
    if graded:
        score = 100.0 * sum(0.0 if r.get("env_error") else float(r.get("score") or 0.0) for r in rows) / len(rows)
    return {"v": v, "iteration": iteration, "episodes": len(rows), "won": won, "success": won / len(rows),
            "score": score}


def validation_curves(validations: list[dict[str, Any]], episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each training run's validation curves, from the episodes the page shows (so a curve and the
    episodes under it agree exactly).

    ``validations`` and ``episodes`` are :func:`page_data`'s (a validation's ``run``, ``iteration``
    and ``graded``; an episode's ``v``, ``won``, ``env_error``, ``score`` and ``task_type``). Returns,
    per run with at least one training validation (``iteration`` not None; an eval run has no
    iteration axis) in the order of ``validations``: ``{"run", "graded", "task_types", "series"}``.
    ``series`` is ``[{"task_type": None, "points": [...]}]`` (every episode of each validation),
    followed, when the run's episodes have two task types or more (one type's curve is the overall
    one, as ``val/success_rate/<type>`` is logged), by one series per task type (sorted, the types
    listed in ``task_types``) with a point at each validation that played that type. A point is
    :func:`_point`'s, in iteration order; a validation with no episodes has none. Success is
    ``val/success_rate`` and score ``val/score`` (graded envs) of that validation.
    """
    by_run: dict[str, list[int]] = {}
    for v, val in enumerate(validations):
        if val["iteration"] is not None:
            by_run.setdefault(val["run"], []).append(v)
    rows_of: dict[int, list[dict[str, Any]]] = {}
    for e in episodes:
        rows_of.setdefault(e["v"], []).append(e)
    curves = []
    for run, vs in by_run.items():
        vs = sorted(vs, key=lambda v: validations[v]["iteration"])
        graded = any(validations[v]["graded"] for v in vs)
        types = sorted({str(e.get("task_type") or "") for v in vs for e in rows_of.get(v, [])})
        if len(types) < 2:
            types = []
        series = [{"task_type": None, "points": [_point(v, validations[v]["iteration"], rows_of[v], graded)
                                                 for v in vs if rows_of.get(v)]}]
        for t in types:
            points = []
            for v in vs:
                rows = [e for e in rows_of.get(v, []) if str(e.get("task_type") or "") == t]
                if rows:
                    points.append(_point(v, validations[v]["iteration"], rows, graded))
            series.append({"task_type": t, "points": points})
        curves.append({"run": run, "graded": graded, "task_types": types, "series": series})
    return curves


def _episode(row: dict[str, Any], v: int) -> dict[str, Any]:
    """A file row as the page reads it; an eval file written before the shared record (``turns``
    the list of turns) is read as one."""
    out = dict(row, v=v)
    if isinstance(row.get("turns"), list):  # eval.py's record before turn_log
        log = row["turns"]
        out["turn_log"] = log
        out["turns"] = len(log)
        out.setdefault("valid_turns", sum(bool(t.get("valid")) for t in log))
    out.setdefault("task_type", "")
    out["won"] = bool(out.get("won"))
    out.setdefault("return", 0.0)
    out.setdefault("valid_turns", 0)
    if "turn_log" not in out:
        out["turn_log"] = None
    return out


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def render_page(data: dict[str, Any], title: str) -> str:
    """The HTML page with ``data`` inside as JSON in which ``<``, ``>`` and ``&`` are escapes, so no
    text of an episode (``</script>``, ``<!--<script>``) can end or bend the data block."""
    blob = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    blob = blob.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return PAGE.read_text().replace("__ARL_TITLE__", html.escape(title)).replace("__ARL_DATA__", blob)


def write_viewer(roots: Path | list[Path], out: Path | None = None, title: str | None = None) -> Path:
    """Write the viewer page of the episodes under ``roots`` (a folder or file, or several) to
    ``out`` (default: ``<first folder>/episodes.html``, beside a file). Returns its path."""
    roots = [Path(r) for r in ([roots] if isinstance(roots, (str, Path)) else roots)]
    data = page_data(roots)
    root = roots[0]
    if out is None:
        out = (root.parent if root.is_file() else root) / "episodes.html"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = len(data["episodes"])
    names = " + ".join(r.resolve().name for r in roots)
    page = render_page(data, title or f"ARL episodes: {names} ({n} episodes)")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out


def find_chromium() -> str | None:
    """The system Chromium's executable (``scripts/system_deps.sh`` installs it), or None: the
    viewer's browser tests and ``bench/viewer.py`` drive it through Playwright. A candidate must
    answer ``--version`` as a Chromium or Chrome build (Ubuntu's ``chromium-browser`` without its
    snap is a shim that does not)."""
    for name in (os.environ.get("ARL_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name) if name else None
        if not path:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and "chrom" in out.stdout.lower():
            return path
    return None
