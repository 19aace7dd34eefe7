"""The names of the per-validation episode files (``<run>/val_episodes/iter<k>.jsonl``), shared by
the callback that writes them and the report that reads them."""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"iter(\d+)\.jsonl")


def episodes_file(folder: Path, iteration: int) -> Path:
    """``folder/iter<iteration>.jsonl``."""
    return Path(folder) / f"iter{int(iteration)}.jsonl"


def iteration_of(path: Path) -> int | None:
    """``k`` of ``iter<k>.jsonl``; None for any other name."""
    match = _NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None
