"""Math problems from files: parquet or jsonl with a question column and a ground-truth column.

The MATH training file of the reference setup (``train_new.parquet``: columns ``question``,
``gt_answer``, ``subject``, ``level``, ...) is one such file. Records whose question or answer is
empty are dropped (that file has two empty ``gt_answer`` rows). Files are read once per process
and cached by path, size and modification time, so building one environment per episode is cheap.

The train/val split is a deterministic shuffle of the record indices by ``split_seed``: the first
``round(n * val_fraction)`` shuffled indices are ``val``, the rest ``train``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "all")  # the env also takes "auto" (by seed)
SUBJECT_KEYS = ("subject", "type", "category")
_CACHE: dict[tuple, tuple["MathRecord", ...]] = {}
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class MathRecord:
    """One problem from a file: the question, its ground-truth answer, and its subject if any."""

    question: str
    answer: str
    subject: str = ""


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def _read_parquet(path: Path, question_key: str, answer_key: str) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:  # a dependency of the package; a clear message all the same
        raise ImportError("reading parquet math data needs pyarrow (pip install pyarrow)") from err
    names = pq.read_schema(path).names
    missing = [k for k in (question_key, answer_key) if k not in names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; columns are {names}")
    subject = next((k for k in SUBJECT_KEYS if k in names), None)
    columns = [question_key, answer_key] + ([subject] if subject else [])
    table = pq.read_table(path, columns=columns)
    data = {name: table.column(name).to_pylist() for name in columns}
    return [
        {"question": q, "answer": a, "subject": data[subject][i] if subject else ""}
        for i, (q, a) in enumerate(zip(data[question_key], data[answer_key]))
    ]


def _read_jsonl(path: Path, question_key: str, answer_key: str) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from err
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object per line")
            missing = [k for k in (question_key, answer_key) if k not in obj]
            if missing:
                raise ValueError(f"{path}:{lineno}: missing key(s) {missing}; keys are {sorted(obj)}")
            subject = next((obj[k] for k in SUBJECT_KEYS if k in obj), "")
            rows.append({"question": obj[question_key], "answer": obj[answer_key], "subject": subject})
    return rows


def load_records(
    path: str | os.PathLike, question_key: str = "question", answer_key: str = "gt_answer"
) -> tuple[MathRecord, ...]:
    """The non-empty records of a ``.parquet`` or ``.jsonl`` file (cached per process).

    Raises ``FileNotFoundError`` naming the path when it does not exist, ``ValueError`` for an
    unknown extension, missing columns, bad JSON lines or a file without any usable record.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"math data file not found: {p}")
    stat = p.stat()
    key = (str(p.resolve()), stat.st_size, stat.st_mtime_ns, question_key, answer_key)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    suffix = p.suffix.lower()
    if suffix == ".parquet":
        rows = _read_parquet(p, question_key, answer_key)
    elif suffix in (".jsonl", ".ndjson"):
        rows = _read_jsonl(p, question_key, answer_key)
    else:
        raise ValueError(f"{p}: unsupported math data format {suffix!r}; use .parquet or .jsonl")
    records = []
    for row in rows:
        question, answer = _cell(row["question"]), _cell(row["answer"])
        if question and answer:
            records.append(MathRecord(question, answer, _cell(row["subject"])))
    dropped = len(rows) - len(records)
    if dropped:
        log.info("%s: dropped %d record(s) with an empty question or answer", p, dropped)
    if not records:
        raise ValueError(f"{p}: no record with a non-empty {question_key!r} and {answer_key!r}")
    result = tuple(records)
    with _CACHE_LOCK:
        _CACHE[key] = result
    return result


def split_indices(n: int, split: str = "train", val_fraction: float = 0.1, split_seed: int = 0) -> list[int]:
    """The record indices of ``split`` (``train``, ``val`` or ``all``), sorted; deterministic.

    ``val`` holds ``round(n * val_fraction)`` indices (at least one when ``val_fraction > 0`` and
    ``n > 1``); ``train`` the others. The two never overlap and together cover ``range(n)``.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not valid; valid: {', '.join(SPLITS)}")
    if not 0.0 <= float(val_fraction) < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    if split == "all":
        return list(range(n))
    order = list(range(n))
    random.Random(f"arl.math_tool.split/{split_seed}").shuffle(order)
    n_val = round(n * float(val_fraction))
    if val_fraction > 0 and n > 1:
        n_val = min(max(n_val, 1), n - 1)
    chosen = order[:n_val] if split == "val" else order[n_val:]
    return sorted(chosen)


__all__ = ["MathRecord", "SPLITS", "load_records", "split_indices"]
