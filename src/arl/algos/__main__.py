"""``python -m arl.algos [--write | --check]``: the files generated from the algo schema
(configs/algo/base.yaml and docs/algorithms.md's key table); see :mod:`arl.algos.schema`."""

import sys

from arl.algos.schema import main

raise SystemExit(main(sys.argv[1:]))
