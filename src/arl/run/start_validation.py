"""The start's validation, played once and shared by the runs of a sweep (``rl.start_validation_cache``).

Every fresh RL run validates its start before the first update (iteration 0). In a sweep over the
RL stage's own choices (learning rate, penalty treatment, GRPO against SAMPO) every run of one seed
starts from the same weights and validates them on the same held-out games with the same sampling
draws (each request samples from its own generator, seeded with the request's seed), so they all
play the same episodes: on ALFWorld's 256 games about 6.5 minutes a run (two runs at a time, one core each). With
``rl.start_validation_cache=<folder>`` the first run to finish that validation stores it there under
a key of everything the validation depends on, and a later run with the same key reads it back
instead of playing it: the same ``val/*`` metrics logged at iteration 0, the same
``val_episodes/iter0.jsonl``, the same ``val_before_rl`` in its record, which also says where the
validation came from (``start_validation``). A run that reads it back also continues from the
random state the playing run had after it (the engine may sample from the process's random stream,
as the transformers engine does in lockstep): the entry keeps the Python, NumPy and torch generator
states after the validation, and the key holds a digest of those before it, so a run that reads it
back trains exactly as it would have after playing it.

The key (:func:`start_key`) is a SHA-256 over the start's weights (every tensor of the policy's
state dict, in order, with its name, dtype and shape) and the config sections that shape a
validation: ``env``, ``rollout``, ``model``, ``trainer`` (less its ``default_root_dir``, the run's own
folder), ``seed`` and ``threads`` (CPU float
arithmetic depends on the thread count), plus the source's git commit where there is one (an entry
written by other code is not reused). A missing entry is played; two runs that miss at the same time
both play and the first to finish keeps its entry (each is written to a temporary folder and renamed).
One process only: under data parallelism the key is refused at start-up (``arl.run.checks``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

# the config sections a start validation depends on (besides the start's weights)
KEY_SECTIONS = ("env", "rollout", "model", "trainer", "seed", "threads")
RUN_SPECIFIC = ("default_root_dir",)  # trainer keys that name the run itself, left out of the key
RECORD = "start_validation.json"
EPISODES = "iter0.jsonl"
RNG = "rng_after.pt"  # the generator states after the validation


@lru_cache(maxsize=1)
def source_commit() -> str:
    """The git commit of this source tree, or ``""`` outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of ``model``'s state dict: each entry's name, dtype, shape and bytes, in order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def rng_states() -> dict[str, Any]:
    """The process's generator states: Python's ``random``, NumPy's global one, torch's CPU one and,
    where there is a GPU, torch's CUDA ones."""
    states: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore :func:`rng_states`."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def rng_digest(states: dict[str, Any]) -> str:
    """SHA-256 of :func:`rng_states`."""
    digest = hashlib.sha256()
    digest.update(repr(states["python"]).encode())
    kind, keys, pos, has_gauss, gauss = states["numpy"][:5]
    digest.update(f"{kind}|{pos}|{has_gauss}|{gauss}|".encode() + np.asarray(keys).tobytes())
    digest.update(states["torch"].numpy().tobytes())
    for state in states.get("cuda", []):
        digest.update(state.numpy().tobytes())
    return digest.hexdigest()


def start_key(c: dict[str, Any], weights: str, commit: str | None = None, rng: str = "") -> str:
    """The cache key of a start validation: SHA-256 (hex, first 24 characters) over the start's
    ``weights`` digest, the :data:`KEY_SECTIONS` of the config ``c``, the source ``commit``
    (default: :func:`source_commit`) and the digest ``rng`` of the generator states before it."""
    sections = {name: c.get(name) for name in KEY_SECTIONS}
    if isinstance(sections["trainer"], dict):  # the run's own folder is not part of the validation
        sections["trainer"] = {k: v for k, v in sections["trainer"].items() if k not in RUN_SPECIFIC}
    payload = json.dumps(
        {"weights": weights, "config": sections, "commit": source_commit() if commit is None else commit, "rng": rng},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class StartValidation:
    """One start validation, as a run stores it and a later run reads it back.

    Attributes:
        values: the ``val/*`` metrics.
        protocol: how the episodes were sampled (``val_sampled`` or ``val_greedy``).
        written_by: the run that played it (its output folder).
        episodes: its ``iter0.jsonl`` (None when the run kept no episode files).
        rng_after: the generator states after it (None: not kept).
        entry: the cache folder it was read from (None before it is stored).
    """

    values: dict[str, float]
    protocol: str
    written_by: str
    episodes: str | None = None
    rng_after: dict[str, Any] | None = None
    entry: str | None = None


def load(cache_dir: str | Path, key: str) -> StartValidation | None:
    """The stored start validation of ``key``; None when there is none."""
    entry = Path(cache_dir) / key
    record = entry / RECORD
    if not record.is_file():
        return None
    stored = json.loads(record.read_text())
    episodes = entry / EPISODES
    return StartValidation(
        values=stored["values"],
        protocol=stored["protocol"],
        written_by=stored["written_by"],
        episodes=str(episodes) if episodes.is_file() else None,
        rng_after=torch.load(entry / RNG, weights_only=False) if (entry / RNG).is_file() else None,
        entry=str(entry),
    )


def save(cache_dir: str | Path, key: str, validation: StartValidation) -> Path:
    """Store ``validation`` under ``key`` (with its episodes file and generator states where it has
    them); an entry already there is kept. Returns the entry's folder."""
    entry = Path(cache_dir) / key
    if (entry / RECORD).is_file():
        return entry
    tmp = Path(cache_dir) / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if validation.episodes is not None and Path(validation.episodes).is_file():
        shutil.copyfile(validation.episodes, tmp / EPISODES)
    if validation.rng_after is not None:
        torch.save(validation.rng_after, tmp / RNG)
    values = {k: float(v) for k, v in validation.values.items()}
    record = {"key": key, "values": values, "protocol": validation.protocol, "written_by": validation.written_by}
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    try:
        os.rename(tmp, entry)
    except OSError:  # another run stored it first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return entry
