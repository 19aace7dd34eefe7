"""Writing a model folder so that a crash never leaves half of one behind."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any


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
