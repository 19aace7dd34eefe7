"""Turn a multirun folder into a markdown table and PNG plots.

    python src/report.py logs/multiruns/<time>                   # writes <folder>/report/
    python src/report.py <folder> --out docs/results/sokoban      # somewhere else
    python src/report.py <folder> --contrast "algo=sampo - algo=grpo" --contrast "algo=cispo_seqmask - algo=cispo"

Prints the table; see ``arl.report`` for what each column means.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too


def main(argv: list[str] | None = None) -> int:
    from arl.report import write_report

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("multirun", type=Path, help="a multirun folder (one subfolder per run)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: <multirun>/report)")
    ap.add_argument("--contrast", action="append", default=None, metavar="SPEC",
                    help='a paired comparison over seeds (one table per measure of arl.report.MEASURES), "A - B" or '
                         '"A - B - C + D" with settings named as in the report (repeatable; default: every '
                         'setting against algo=grpo)')
    args = ap.parse_args(argv)
    try:
        path = write_report(args.multirun, args.out, contrasts=args.contrast)
    except (FileNotFoundError, ValueError) as err:
        print(f"report: {err}", file=sys.stderr)
        return 2
    print(path.read_text())
    print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
