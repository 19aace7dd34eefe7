"""The episode viewer: every validation episode under a folder as one self-contained HTML page.

``python src/view.py <folder>`` finds the validation files below ``<folder>`` (a training run's
``val_episodes/iter<k>.jsonl``, an eval run's ``val_episodes.jsonl``, a study archive's runs, or
one such file) and writes one HTML file that opens from disk, offline, with no server: the
episodes filtered by outcome, task type, validation iteration, run seed and run; each episode turn
by turn (the observation, the model's whole response with its thinking greyed, the parsed action,
valid or why not, the reward, the GiGPO anchor key); and two validations on the same games side by
side (games gained and lost, McNemar's exact test, as ``src/compare.py`` counts them). The data sit
in the page as JSON; the browser renders one page of the list and one episode at a time, so
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

from arl.utils.episode_files import iteration_of

PAGE = Path(__file__).with_name("viewer_page.html")
EVAL_FILE = "val_episodes.jsonl"
_SEED_IN_NAME = re.compile(r"seed_?(\d+)(?!.*seed)")
SUMMARY_ONLY = ("this file holds episode summaries only (written before validation files kept the turns, or "
                "archived without them: scripts/archive_runs.sh); the run folder's own files have them")


@dataclass
class ValidationFile:
    """One validation's episode file: ``run`` (the run folder relative to the viewed folder),
    ``iteration`` (the RL iteration, None for an eval run) and the run's ``seed`` when known."""

    path: Path
    run: str
    iteration: int | None
    run_seed: int | None

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


def find_validations(root: Path) -> list[ValidationFile]:
    """The validation files under ``root`` (or ``root`` itself when it is one), ordered by run and
    iteration (an eval file last in its run)."""
    root = Path(root)
    if root.is_file():
        k = iteration_of(root)
        run_dir = root.parent.parent if k is not None else root.parent
        return [ValidationFile(root, run_dir.name or str(run_dir), k, _run_seed(run_dir))]
    if not root.is_dir():
        raise FileNotFoundError(f"{root} does not exist")
    found = []
    for path in root.rglob("*.jsonl"):
        k = iteration_of(path)
        if k is not None and path.parent.name == "val_episodes":
            run_dir = path.parent.parent
        elif path.name == EVAL_FILE:
            run_dir = path.parent
        else:
            continue
        rel = run_dir.relative_to(root).as_posix()
        found.append(ValidationFile(path, root.resolve().name if rel == "." else rel, k, _run_seed(run_dir)))
    found.sort(key=lambda f: (f.run, f.iteration is None, f.iteration or 0))
    return found


def page_data(roots: Path | list[Path]) -> dict[str, Any]:
    """What the page of one folder or several shows: ``validations`` (run, iteration, run seed,
    label, the file relative to its folder, a note on what is missing) and ``episodes`` (each row of
    each file, with ``v``, its validation's index). With several folders (two eval runs, say) each
    run is named after its folder too."""
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
                            "missing": None if has_turns else SUMMARY_ONLY})
        for row in rows:
            episodes.append(_episode(row, v))
    if summary_only:
        notes.append(f"{summary_only} of {len(files)} validation files hold episode summaries only, no turns: "
                     + SUMMARY_ONLY + ".")
    return {"source": ", ".join(map(str, roots)), "validations": validations, "episodes": episodes, "notes": notes}


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
