"""Write the episode viewer: one self-contained HTML page of every validation episode under a folder.

    python src/view.py logs/sampo_sokoban/runs/<time>                 # a training run: each validation
    python src/view.py logs/eval/runs/<time>                          # an eval run's val_episodes.jsonl
    python src/view.py docs/results/alfworld_calibration --out /tmp/alf.html   # a study archive
    python src/view.py <run>/val_episodes/iter12.jsonl                # one file
    python src/view.py logs/cmp/start_s1 logs/cmp/rl_s1 --out cmp.html  # two eval runs on the same games

Open the page in any browser, offline: filter by outcome, task type, iteration, run seed and run;
read an episode turn by turn; put two validations side by side on the same games; see each training
run's validation success (and WebShop's score) over iterations, overall and per task type, with the
validation of the episode on screen marked (``arl.analysis.viewer``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too

from arl.analysis.viewer import write_viewer  # after the sys.path line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", type=Path, nargs="+", help="run folders, eval folders, study archives or episodes files")
    ap.add_argument("--out", type=Path, default=None, help="the HTML file (default: <first folder>/episodes.html)")
    ap.add_argument("--title", default=None, help="the page's title")
    args = ap.parse_args(argv)
    try:
        out = write_viewer(args.folders, args.out, args.title)
    except FileNotFoundError as err:
        print(f"view: {err}", file=sys.stderr)
        return 2
    print(f"view: {out} ({out.stat().st_size / 1e6:.1f} MB); open it in a browser")
    return 0


if __name__ == "__main__":
    sys.exit(main())
