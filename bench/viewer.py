"""Benchmark of the episode viewer (src/view.py): how long a page of many episodes takes to write and to
open in headless Chromium.

For each size (``--episodes``, default 300 and 3000) it writes a synthetic run folder shaped like an
ALFWorld study's validations (episodes of ``--turns`` turns with observations of about 600 characters and
responses of about 150, 96 games a validation file), writes the page, and opens it in the system Chromium
through Playwright, timing: navigation until the list is rendered (``open s``: parsing the embedded JSON,
building the filters, the first page of the list and the comparison table), opening one episode turn by turn,
and a filter change. The acceptance line is ``open s`` under 5 s for 3000 episodes on the 2-core machine.

With ``--screenshot PATH [--folder F]`` it also saves a screenshot of the page of ``F`` (a run, eval folder
or archive; default: the largest synthetic one) with one episode and one comparison open, for the docs.

Run: ``python bench/viewer.py [--episodes 300 3000] [--screenshot docs/images/viewer.png --folder <run>]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

try:
    import arl  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rich.console import Console
from rich.table import Table

from arl.analysis.viewer import find_chromium, write_viewer

WORDS = (  # noqa: SIM905 - a sentence, cut into its words
    "you are in the middle of a room looking around you see a cabinet 1 drawer 2 countertop 3 sinkbasin 1 mug 2"
).split()


def _text(rng: random.Random, chars: int) -> str:
    out = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)


def synthetic_folder(root: Path, episodes: int, turns: int, per_file: int = 96) -> Path:
    """A run folder of ``episodes`` validation episodes, ``per_file`` per validation file."""
    rng = random.Random(episodes)
    folder = root / f"synthetic_{episodes}" / "val_episodes"
    folder.mkdir(parents=True)
    for k in range((episodes + per_file - 1) // per_file):
        n = min(per_file, episodes - k * per_file)
        with (folder / f"iter{k}.jsonl").open("w") as f:
            for i in range(n):
                log = [{"observation": _text(rng, 600), "response": f"<think>{_text(rng, 100)}</think><action>go to cabinet 1</action>",
                        "action": "go to cabinet 1", "valid": rng.random() < 0.7, "reason": "", "reward": 0.0,
                        "truncated": False, "anchor": f"{rng.getrandbits(64):016x}"} for _ in range(turns)]
                won = rng.random() < 0.3
                f.write(json.dumps({"seed": 1073741824 + i, "task_type": rng.choice(["pick", "look"]), "won": won,
                                    "return": 10.0 if won else 0.0, "turns": turns, "valid_turns": sum(t["valid"] for t in log),
                                    "episode_id": i, "score": float(won), "env_error": False, "turn_log": log}) + "\n")
    return folder.parent


def time_page(browser, html: Path) -> dict[str, float]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    t0 = time.perf_counter()
    page.goto(html.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    page.click("#list tbody tr >> nth=0")
    page.wait_for_selector("#detail-body .turn")
    episode = time.perf_counter() - t0
    t0 = time.perf_counter()
    page.select_option("#f-outcome", "won")
    page.wait_for_function("document.getElementById('count').textContent.length > 0")
    filtered = time.perf_counter() - t0
    page.close()
    return {"open": opened, "episode": episode, "filter": filtered}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, nargs="+", default=[300, 3000])
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--screenshot", type=Path, default=None)
    ap.add_argument("--folder", type=Path, default=None, help="the folder whose page the screenshot shows")
    args = ap.parse_args()
    chromium = find_chromium()
    if chromium is None:
        print("bench/viewer.py: no chromium on this machine (scripts/system_deps.sh installs it); skipped")
        return 0
    from playwright.sync_api import sync_playwright

    console = Console()
    table = Table(title=f"episode viewer in headless Chromium ({Path(chromium).name}), median of {args.repeats}")
    for col in ("episodes", "turns each", "page MB", "write s", "open s", "episode s", "filter s"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        last = None
        for n in args.episodes:
            folder = synthetic_folder(Path(tmp), n, args.turns)
            t0 = time.perf_counter()
            html = write_viewer(folder, Path(tmp) / f"page_{n}.html")
            written = time.perf_counter() - t0
            runs = [time_page(browser, html) for _ in range(args.repeats)]
            med = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
            table.add_row(str(n), str(args.turns), f"{html.stat().st_size / 1e6:.1f}", f"{written:.2f}",
                          f"{med['open']:.2f}", f"{med['episode']:.3f}", f"{med['filter']:.3f}")
            last = folder
        if args.screenshot is not None:
            html = write_viewer(args.folder or last, Path(tmp) / "shot.html")
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            won = page.locator("#list tbody tr:has(.won)")
            (won.first if won.count() else page.locator("#list tbody tr").first).click()
            args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.screenshot))
            console.print(f"screenshot: {args.screenshot}")
        browser.close()
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
