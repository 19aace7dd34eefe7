"""Writing a model folder so that a crash never leaves half of one behind, and a cached folder that
processes building it at once (test workers, the ranks of a run) build once."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<out>.lock`` (``fcntl.flock``, released when the process dies)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(out: Path, ready: Callable[[Path], bool], build: Callable[[], Path]) -> Path:
    """``out`` when ``ready(out)``, else ``build()`` under :func:`folder_lock`: of processes asking at
    once, one builds and the others wait, then find it ready (no folder is replaced while read)."""
    out = Path(out)
    if ready(out):
        return out
    with folder_lock(out):
        if ready(out):
            return out
        return build()


def save_folder_atomically(out: Path, model, tokenizer, sidecar: str, meta: dict[str, Any], prefix: str) -> Path:
    """Save ``model``, ``tokenizer`` and ``meta`` (as the JSON file ``sidecar``) into ``out``.

    Everything is written to a temporary sibling folder (``<prefix>...``) that is renamed to ``out``
    at the end, replacing an older ``out``; on any error the temporary folder is removed and ``out``
    is left as it was. Returns ``out``.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=prefix))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / sidecar).write_text(json.dumps(meta, indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
