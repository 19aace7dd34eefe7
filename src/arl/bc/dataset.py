"""The behaviour-cloning dataset file: episodes as JSON lines, after one header line.

A dataset is tied to the tokenizer that produced its token ids and to the sample mode its prompts
were built for (``turn`` prompts are whole rendered prompts, ``trajectory`` prompts are the
continuation of one token stream), so the header records both and :func:`load_episodes` refuses a
file that does not match the run, with a message that says which of them differs.

    {"format": "arl-bc-dataset/1", "env": "sokoban", "sample_mode": "turn", "tokenizer": "3f0c...", "episodes": 1612}
    {"source": "expert", "group_id": 0, "seed": 8812, ..., "turns": [{"prompt_ids": [...], ...}, ...]}
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from arl.agent.records import Episode, Turn

FORMAT = "arl-bc-dataset/1"
SOURCES = ("expert", "self", "dagger")


@dataclasses.dataclass
class BCEpisode:
    """An episode of the dataset and where it came from: ``expert``, ``self``-bootstrapped, or
    ``dagger`` (the policy's states, the expert's answers)."""

    episode: Episode
    source: str


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of the vocabulary (token -> id), special tokens and chat template."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    h = hashlib.sha256()
    h.update(json.dumps(vocab, ensure_ascii=False).encode())
    h.update(str(getattr(tokenizer, "chat_template", "") or "").encode())
    h.update(str(tokenizer.eos_token_id).encode())
    return h.hexdigest()[:16]


def _episode_to_dict(item: BCEpisode) -> dict:
    data = dataclasses.asdict(item.episode)
    data["source"] = item.source
    return data


def _episode_from_dict(data: dict) -> BCEpisode:
    data = dict(data)
    source = data.pop("source", "expert")
    turns = [Turn(**t) for t in data.pop("turns")]
    return BCEpisode(Episode(**data, turns=turns), source)


def save_episodes(
    path: str | Path, items: Sequence[BCEpisode], tokenizer, sample_mode: str, env_name: str
) -> Path:
    """Write ``items`` to ``path`` (atomically: a crash leaves the old file or none)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for item in items:
        if item.source not in SOURCES:
            raise ValueError(f"episode source {item.source!r} is not one of {SOURCES}")
    header = {
        "format": FORMAT,
        "env": env_name,
        "sample_mode": sample_mode,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "episodes": len(items),
        "sources": {s: sum(i.source == s for i in items) for s in SOURCES},
    }
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for item in items:
            f.write(json.dumps(_episode_to_dict(item), ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_header(path: str | Path) -> dict:
    """The header line of a dataset file."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        header = {}
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path} is not an ARL behaviour-cloning dataset (its first line is not a {FORMAT} header)")
    return header


def load_episodes(
    path: str | Path, tokenizer=None, sample_mode: str | None = None, env_name: str | None = None
) -> list[BCEpisode]:
    """Read a dataset file; checks env, sample mode and tokenizer against the given ones."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"bc.dataset_path={str(path)!r} does not exist")
    header = read_header(path)
    problems = []
    if env_name is not None and header["env"] != env_name:
        problems.append(f"it holds {header['env']!r} episodes, the run plays {env_name!r}")
    if sample_mode is not None and header["sample_mode"] != sample_mode:
        problems.append(f"its sample mode is {header['sample_mode']!r}, the run's rollout.sample_mode is {sample_mode!r}")
    if tokenizer is not None and header["tokenizer"] != tokenizer_fingerprint(tokenizer):
        problems.append("its token ids come from another tokenizer than the run's model")
    if problems:
        raise ValueError(f"bc.dataset_path={str(path)!r} does not fit this run: " + "; ".join(problems))
    with open(path, encoding="utf-8") as f:
        next(f)
        items = [_episode_from_dict(json.loads(line)) for line in f if line.strip()]
    if len(items) != header["episodes"]:
        raise ValueError(f"{path} is truncated: the header announces {header['episodes']} episodes, {len(items)} found")
    return items


def episodes_of(items: Iterable[BCEpisode]) -> list[Episode]:
    return [item.episode for item in items]
