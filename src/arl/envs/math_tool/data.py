"""Math problems from files: parquet or jsonl, in the formats the field's data comes in.

The format is found from the columns (or set with ``question_key``/``answer_key``):

- **verl / verl-agent**: ``prompt`` is a list of chat messages and ``reward_model`` a dict with
  ``ground_truth`` (and ``style``); ``data_source``, ``ability`` and ``extra_info`` beside them
  (the AIME and MATH files of verl's examples). The question is the content of the last user
  message, a system message (if any) is kept as the problem's system prompt, the answer is
  ``reward_model.ground_truth``; ``data_source`` and ``extra_info`` are kept with the record.
- **flat**: a question column and an answer column: ``question`` + ``gt_answer`` (the MATH
  training file of the reference setup, ``train_new.parquet``: also ``subject``, ``level``, ...),
  ``question`` + ``answer``, or ``problem`` + ``answer``.

A file whose columns match no format stops with a message that lists its columns and the keys to
set. Explicit keys also take chat-message and ``reward_model``-style cells. Records whose question
or answer is empty are dropped (the MATH file has two empty ``gt_answer`` rows). Files are read once per process
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "all")  # the env also takes "auto" (by seed)
SUBJECT_KEYS = ("subject", "type", "category")
VERL_KEYS = ("prompt", "reward_model")  # verl / verl-agent: chat messages, {ground_truth, style}
FLAT_KEYS = (("question", "gt_answer"), ("question", "answer"), ("problem", "answer"))
KEPT_KEYS = ("data_source", "extra_info")  # kept with each record (the episode info)
_CACHE: dict[tuple, tuple[MathRecord, ...]] = {}
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class MathRecord:
    """One problem from a file: the question, its ground-truth answer, and its subject if any."""

    question: str
    answer: str
    subject: str = ""
    system: str = ""  # the system message of a chat-format question
    data_source: str = ""
    extra_info: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def resolve_keys(path: Path, names: list[str], question_key: str | None, answer_key: str | None) -> tuple[str, str]:
    """The (question, answer) columns of a file with columns ``names``: the keys given, or the
    first known format whose columns the file has (module docstring)."""
    missing = [k for k in (question_key, answer_key) if k and k not in names]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; columns are {sorted(names)}")
    if question_key and answer_key:
        return question_key, answer_key
    candidates = [VERL_KEYS, *FLAT_KEYS]
    if question_key or answer_key:  # one key given: the formats that agree with it
        candidates = [c for c in candidates if question_key in (None, c[0]) and answer_key in (None, c[1])]
    for q, a in candidates:
        if q in names and a in names:
            return q, a
    known = "; ".join(f"{q} + {a}" for q, a in [VERL_KEYS, *FLAT_KEYS])
    raise ValueError(
        f"{path}: the columns {sorted(names)} match no known math data format ({known}); set "
        "env.kwargs.question_key and env.kwargs.answer_key to the question and answer columns"
    )


def chat_question(cell) -> tuple[str, str] | None:
    """(question, system prompt) of a list of chat messages: the last user message's content and
    the first system message's; None when ``cell`` is not a list of messages."""
    if not isinstance(cell, (list, tuple)) or not cell or not all(isinstance(m, dict) and "content" in m for m in cell):
        return None
    users = [m for m in cell if m.get("role", "user") == "user"]
    system = next((m["content"] for m in cell if m.get("role") == "system"), "")
    return (users[-1]["content"] if users else ""), system or ""


def ground_truth(cell):
    """The answer of an answer cell: ``reward_model``-style dicts give their ``ground_truth``, a
    list of answers its first."""
    if isinstance(cell, dict):
        cell = cell.get("ground_truth", "")
    if isinstance(cell, (list, tuple)):
        cell = cell[0] if cell else ""
    return cell


def _row(obj: dict, question_key: str, answer_key: str, subject_key: str | None) -> dict:
    question, system = obj[question_key], ""
    chat = chat_question(question)
    if chat is not None:
        question, system = chat
    extra = obj.get("extra_info")
    return {
        "question": question, "answer": ground_truth(obj[answer_key]), "system": system,
        "subject": obj.get(subject_key, "") if subject_key else "",
        "data_source": obj.get("data_source") or "",
        "extra_info": dict(extra) if isinstance(extra, dict) else {},
    }


def _read_parquet(path: Path, question_key: str | None, answer_key: str | None) -> list[dict]:
    try:
        import pyarrow.parquet as pq  # heavy: pyarrow (~0.2 s), only for parquet data
    except ImportError as err:  # a dependency of the package; a clear message all the same
        raise ImportError("reading parquet math data needs pyarrow (pip install pyarrow)") from err
    names = pq.read_schema(path).names
    question_key, answer_key = resolve_keys(path, names, question_key, answer_key)
    subject = next((k for k in SUBJECT_KEYS if k in names), None)
    columns = list(dict.fromkeys([question_key, answer_key, *([subject] if subject else []), *(k for k in KEPT_KEYS if k in names)]))
    rows = pq.read_table(path, columns=columns).to_pylist()
    return [_row(obj, question_key, answer_key, subject) for obj in rows]


def _read_jsonl(path: Path, question_key: str | None, answer_key: str | None) -> list[dict]:
    rows = []
    keys: tuple[str, str] | None = None
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
            if keys is None:  # the format is the first record's
                keys = resolve_keys(path, list(obj), question_key, answer_key)
            missing = [k for k in keys if k not in obj]
            if missing:
                raise ValueError(f"{path}:{lineno}: missing key(s) {missing}; keys are {sorted(obj)}")
            subject = next((k for k in SUBJECT_KEYS if k in obj), None)
            rows.append(_row(obj, *keys, subject))
    return rows


def load_records(
    path: str | os.PathLike, question_key: str | None = None, answer_key: str | None = None
) -> tuple[MathRecord, ...]:
    """The non-empty records of a ``.parquet`` or ``.jsonl`` file (cached per process); the
    columns are found from the file's format unless ``question_key``/``answer_key`` are given.

    Raises ``FileNotFoundError`` naming the path when it does not exist, ``ValueError`` for an
    unknown extension, columns of no known format, missing columns, bad JSON lines or a file
    without any usable record.
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
            records.append(MathRecord(question, answer, _cell(row["subject"]), _cell(row["system"]),
                                      _cell(row["data_source"]), row["extra_info"]))
    dropped = len(rows) - len(records)
    if dropped:
        log.info("%s: dropped %d record(s) with an empty question or answer", p, dropped)
    if not records:
        raise ValueError(f"{p}: no record with a non-empty question and answer")
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


__all__ = ["SPLITS", "MathRecord", "load_records", "split_indices"]
