"""What an agent does after its first invalid action, read from episode files with turns.

A cloned ALFWorld policy that derails tends to repeat the command it failed with until the turn
limit: the env answers ``Nothing happens.``, an observation expert games never show. This module
counts, for one validation's episodes (a run's ``val_episodes/iter<k>.jsonl`` or an eval run's
``val_episodes.jsonl``, written with their ``turn_log``), where the first invalid action comes, what
it was (the parser's reason; for a command that is not admissible, its verb) and what follows it:
the next turn valid again, the same command repeated, the length of the run of invalid turns it
opens, whether a valid turn ever follows, whether the episode is still won.

    python src/report.py errors <episodes file | run | eval run> [...]   # one column per input
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from arl.utils.episode_files import iteration_of

NOT_ADMISSIBLE = "not admissible"


@dataclass(frozen=True)
class FirstError:
    """One episode's first invalid turn and what followed it."""

    turn: int  # its index in the episode (0-based)
    kind: str  # the parser's reason; "not admissible: <verb>" for a command the env does not list
    next_turn: str  # "valid", "same" (the same invalid answer again), "other invalid" or "end"
    invalid_run: int  # consecutive invalid turns from it on (>= 1)
    recovered: bool  # a valid turn comes later in the episode
    won: bool


@dataclass
class ErrorSummary:
    """The episodes of one validation, and the first error of each that had one."""

    episodes: int = 0
    won: int = 0
    turns: int = 0
    errors: list[FirstError] = field(default_factory=list)


_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)


def attempted_command(turn: dict) -> str:
    """What an invalid turn tried to do: its ``action`` field, or (the agent loop records ``""`` for an
    invalid turn) the text between the response's action tags."""
    if turn.get("action"):
        return str(turn["action"])
    match = _ACTION.search(str(turn.get("response") or ""))
    return match.group(1).strip() if match else ""


def error_kind(turn: dict) -> str:
    """The parser's reason of an invalid turn; a command that is not admissible by its verb
    (``not admissible: take``)."""
    reason = str(turn.get("reason") or "invalid")
    if reason == NOT_ADMISSIBLE:
        words = attempted_command(turn).split()
        return f"{NOT_ADMISSIBLE}: {words[0].lower() if words else '(empty)'}"
    return reason


def first_error(turns: list[dict], won: bool) -> FirstError | None:
    """The first invalid turn of an episode's ``turn_log`` and what follows it; None when every
    turn was valid."""
    first = next((i for i, t in enumerate(turns) if not t.get("valid")), None)
    if first is None:
        return None
    run = 1
    while first + run < len(turns) and not turns[first + run].get("valid"):
        run += 1
    if first + 1 == len(turns):
        following = "end"
    elif turns[first + 1].get("valid"):
        following = "valid"
    elif _answer(turns[first + 1]) == _answer(turns[first]):
        following = "same"
    else:
        following = "other invalid"
    recovered = any(t.get("valid") for t in turns[first + 1 :])
    return FirstError(first, error_kind(turns[first]), following, run, recovered, bool(won))


def _answer(turn: dict) -> str:
    """What an invalid turn tried: its command when it has one, else its whole response."""
    return str(attempted_command(turn) or turn.get("response") or "").strip().lower()


def episodes_path(path: Path) -> Path:
    """The episodes file of ``path``: the file itself, an eval run's ``val_episodes.jsonl``, or a
    training run's last validation (``val_episodes/iter<k>.jsonl`` with the largest k)."""
    path = Path(path)
    if path.is_file():
        return path
    if (path / "val_episodes.jsonl").exists():
        return path / "val_episodes.jsonl"
    files = [p for p in (path / "val_episodes").glob("iter*.jsonl") if iteration_of(p) is not None]
    if not files:
        raise FileNotFoundError(f"{path}: no episodes file (val_episodes.jsonl or val_episodes/iter<k>.jsonl)")
    return max(files, key=lambda p: iteration_of(p) or 0)


def summarise(path: Path) -> ErrorSummary:
    """The first errors of every episode of one episodes file (``path`` as :func:`episodes_path`).
    Raises ``ValueError`` when the file has no turns (written without ``turn_log``)."""
    file = episodes_path(path)
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if not r.get("env_error")]
    if rows and not any(r.get("turn_log") for r in rows):
        raise ValueError(f"{file}: the episodes have no turn_log (archives drop it unless KEEP_TURNS=1)")
    out = ErrorSummary()
    for row in rows:
        turns = row.get("turn_log") or []
        out.episodes += 1
        out.won += bool(row.get("won"))
        out.turns += len(turns)
        error = first_error(turns, bool(row.get("won")))
        if error is not None:
            out.errors.append(error)
    return out


def share(n: float, d: int) -> str:
    """``n / d`` to three places with the count ``n`` beside it; ``-`` when ``d`` is 0."""
    return f"{n / d:.3f} ({n:g})" if d else "-"


class ColumnTable:
    """A markdown table of the episode readers (``report.py errors``, ``report.py shopping``): one
    column per input (the keys of ``summaries``), one row per measure."""

    def __init__(self, summaries: dict):
        self.summaries = summaries
        self.rows: list[tuple[str, list[str]]] = []

    def row(self, label: str, cell) -> None:
        """A row: ``cell(summary)`` for each input."""
        self.rows.append((label, [cell(s) for s in self.summaries.values()]))

    def markdown(self, note: str = "") -> str:
        names = list(self.summaries)
        head = "| | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
        body = "".join(f"| {label} | " + " | ".join(cells) + " |\n" for label, cells in self.rows)
        return head + body + note


def errors_table(summaries: dict[str, ErrorSummary], top: int = 6) -> str:
    """A markdown table, one column per input: how often the first error comes, where, what it is
    (the ``top`` most common kinds over all inputs) and what follows it."""
    table = ColumnTable(summaries)
    row = table.row

    row("episodes", lambda s: str(s.episodes))
    row("won", lambda s: share(s.won, s.episodes))
    row("with an invalid turn", lambda s: share(len(s.errors), s.episodes))
    row("first invalid turn (mean index)",
        lambda s: f"{sum(e.turn for e in s.errors) / len(s.errors):.1f}" if s.errors else "-")
    kinds = Counter(e.kind for s in summaries.values() for e in s.errors)
    for kind, _ in kinds.most_common(top):
        row(f"first error: {kind}", lambda s, k=kind: share(sum(e.kind == k for e in s.errors), len(s.errors)))
    for following in ("valid", "same", "other invalid", "end"):
        row(f"next turn: {following}",
            lambda s, f=following: share(sum(e.next_turn == f for e in s.errors), len(s.errors)))
    row("invalid turns in a row from it (mean)",
        lambda s: f"{sum(e.invalid_run for e in s.errors) / len(s.errors):.1f}" if s.errors else "-")
    row("a valid turn later", lambda s: share(sum(e.recovered for e in s.errors), len(s.errors)))
    row("won after it", lambda s: share(sum(e.won for e in s.errors), len(s.errors)))
    return table.markdown("\nShares after the first three rows are of the episodes with an invalid turn; 'same': the "
                          "next turn gave the same invalid answer again; 'end': the first error was the episode's "
                          "last turn.\n")
