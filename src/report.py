"""Turn a multirun folder into a markdown table and PNG plots; keep the results page true to its archives.

    python src/report.py logs/multiruns/<time>                   # writes <folder>/report/
    python src/report.py <folder> --out docs/results/sokoban      # somewhere else
    python src/report.py <folder> --contrast "algo=sampo - algo=grpo" --contrast "algo=cispo_seqmask - algo=cispo"
    python src/report.py findings                  # the generated blocks of docs/results.md and README.md, printed
    python src/report.py findings --write          # ... written into the pages, between their markers
    python src/report.py findings --check          # exit 1 naming every number a page has that the archives do not give
                                                   # (and every number of a checked page's prose that is not generated or marked recorded)
    python src/report.py <folder> --plan docs/results/<study>/plan.yaml   # ... and every departure from the study's plan
    python src/report.py <folder> --contrast "A - B" --measure final@sokoban_7x7   # a mix member's final success only
    python src/report.py calibration <folder>      # a calibration grid's table (scripts/calibrate.sh), best setting named
    python src/report.py errors <run> [<run> ...]  # what follows the first invalid action (episodes with turns)
    python src/report.py shopping <run> [<run> ...]  # where WebShop episodes break: query, click, purchase

Prints the table; see ``arl.analysis.report`` for what each column means and ``arl.analysis.findings``
for the findings (spec: docs/results/findings.yaml). A multirun folder named ``findings`` is ``./findings``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `arl` without installing, too

from arl.analysis.calibration import write_calibration  # after the sys.path line
from arl.analysis.errors import errors_table
from arl.analysis.errors import summarise as summarise_errors
from arl.analysis.findings import load_spec
from arl.analysis.pages import check_pages, generate, write_pages
from arl.analysis.report import write_report
from arl.analysis.study_plan import load_plan

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = ROOT / "docs" / "results" / "findings.yaml"


def findings_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="report.py findings",
                                 description="the findings of the results page, computed from the run archives")
    ap.add_argument("spec", type=Path, nargs="?", default=DEFAULT_SPEC,
                    help=f"the findings spec (default: {DEFAULT_SPEC.relative_to(ROOT)} of this checkout)")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="rewrite the generated blocks of the spec's pages")
    what.add_argument("--check", action="store_true",
                      help="exit 1 naming every number of a generated block or value that differs from what the "
                           "archives give, and every number of the prose of the spec's `prose` pages that is neither "
                           "generated, part of a name, nor marked recorded")
    what.add_argument("--block", action="append", default=None, metavar="NAME", help="print one block (repeatable)")
    args = ap.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        if args.check:
            problems = check_pages(spec)
            for p in problems:
                print(p)
            pages = ", ".join(str(p) for p in spec.pages)
            print(f"findings: {len(problems)} difference(s) between {pages} and the archives"
                  + ("; `python src/report.py findings --write` regenerates the blocks" if problems else ""),
                  file=sys.stderr if problems else sys.stdout)
            return 1 if problems else 0
        if args.write:
            written = write_pages(spec)
            print("findings: " + (f"rewrote {', '.join(map(str, written))}" if written else "every page was up to date"))
            return 0
        names = args.block or list(dict.fromkeys(n for blocks in spec.pages.values() for n in blocks))
        for name in names:
            print(f"<!-- {name}:begin -->\n{generate(spec, name).rstrip()}\n<!-- {name}:end -->\n")
        return 0
    except (FileNotFoundError, ValueError, KeyError) as err:
        print(f"report findings: {err}", file=sys.stderr)
        return 2


def calibration_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="report.py calibration",
                                 description="the calibration table of a grid of RL runs from one start")
    ap.add_argument("multirun", type=Path, help="the grid's multirun folder (scripts/calibrate.sh: <OUT>/rl)")
    ap.add_argument("--out", type=Path, default=None, help="folder of calibration.md (default: the multirun folder)")
    args = ap.parse_args(argv)
    try:
        path = write_calibration(args.multirun, args.out)
    except (FileNotFoundError, ValueError) as err:
        print(f"report calibration: {err}", file=sys.stderr)
        return 2
    print(path.read_text())
    print(f"calibration written to {path}")
    return 0


def _columns_main(argv: list[str], command: str, description: str, summarise, table) -> int:
    """An episode reader's command line: one column per input (``--name`` each), ``table`` of the
    ``summarise``d inputs printed."""
    ap = argparse.ArgumentParser(prog=f"report.py {command}", description=description)
    ap.add_argument("inputs", type=Path, nargs="+",
                    help="an episodes file, an eval run (val_episodes.jsonl) or a training run (its last validation)")
    ap.add_argument("--name", action="append", default=None, help="a column's name, one per input (default: the path)")
    args = ap.parse_args(argv)
    names = args.name or [str(p) for p in args.inputs]
    if len(names) != len(args.inputs):
        print(f"report {command}: give one --name per input", file=sys.stderr)
        return 2
    try:
        print(table({name: summarise(p) for name, p in zip(names, args.inputs)}))
    except (FileNotFoundError, ValueError) as err:
        print(f"report {command}: {err}", file=sys.stderr)
        return 2
    return 0


def errors_main(argv: list[str]) -> int:
    return _columns_main(argv, "errors", "what follows the first invalid action, per validation (turns kept)",
                         summarise_errors, errors_table)


def shopping_main(argv: list[str]) -> int:
    # heavy: the shopping reader replays episodes in the WebShop env (and reads configs with omegaconf);
    # the other commands need neither
    from arl.analysis.shopping import shopping_table, summarise

    return _columns_main(argv, "shopping", "where WebShop episodes break: the query, the click, the purchase "
                         "(turns kept)", summarise, shopping_table)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["errors"]:
        return errors_main(argv[1:])
    if argv[:1] == ["shopping"]:
        return shopping_main(argv[1:])
    if argv[:1] == ["findings"]:
        return findings_main(argv[1:])
    if argv[:1] == ["calibration"]:
        return calibration_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("multirun", type=Path, help="a multirun folder (one subfolder per run); `findings`: see above")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: <multirun>/report)")
    ap.add_argument("--contrast", action="append", default=None, metavar="SPEC",
                    help='a paired comparison over seeds (one table per measure: --measure), '
                         '"A - B" or "A - B - C + D" with settings named as in the report (repeatable; default: '
                         'every setting against algo=grpo)')
    ap.add_argument("--measure", action="append", default=None, metavar="MEASURE",
                    help="a measure the paired comparisons are made on (repeatable; default: every overall measure "
                         "the runs logged and, for a mix, each member's final success and gain): final, gain, "
                         "training, training-valid, or one member's <kind>@<member> (final@sokoban_7x7, "
                         "gain@sokoban_7x7, training@..., training-valid@...), as findings.yaml spells them")
    ap.add_argument("--plan", type=Path, default=None,
                    help="the study's plan file (arl.analysis.study_plan): the report prints every departure from it")
    args = ap.parse_args(argv)
    try:
        plan = load_plan(args.plan) if args.plan else None
        path = write_report(args.multirun, args.out, contrasts=args.contrast, plan=plan, measures=args.measure)
    except (FileNotFoundError, ValueError) as err:
        print(f"report: {err}", file=sys.stderr)
        return 2
    print(path.read_text())
    print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
