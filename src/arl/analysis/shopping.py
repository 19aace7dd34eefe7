"""Where a WebShop policy loses its episodes, stage by stage, read from episode files with turns.

A WebShop episode is a chain: type the task's query, open a product from the results, set its
options, buy. This module replays each episode's goal in the env its run used (the run's
``.hydra/config.yaml`` gives ``env.kwargs``) and measures every link against the scripted shopper
(:mod:`arl.envs.webshop.expert`):

- the search: the first query equal to the shopper's (``goal_query``), or the share of its words
  the typed query keeps and adds;
- the results: the first product click on the page (an id copied right), the first result, or the
  product the shopper would open on that page; a click on an id the page does not show, and the
  same click again right after it;
- the end: a purchase, its score, a win;
- wins split by whether the query was the shopper's.

    python src/report.py shopping <episodes file | run | eval run> [...]   # one column per input
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from arl.analysis.errors import ColumnTable, attempted_command, episodes_path, share
from arl.envs.webshop import WebShopEnv
from arl.envs.webshop.expert import goal_query, predicted_score

_SEARCH = re.compile(r"^search\[(.*)\]$", re.DOTALL)
_CLICK = re.compile(r"^click\[(.*)\]$", re.DOTALL)
_RESULT_LINE = re.compile(r"^([A-Z0-9]{10}):", re.MULTILINE)
NOT_ON_PAGE = "Invalid action: click target not on this page."
BUY = "click[buy now]"


@dataclass
class ShoppingSummary:
    """Counts over the episodes of one validation (see :func:`summarise`)."""

    episodes: int = 0
    won: int = 0
    score: float = 0.0
    searched: int = 0
    query_exact: int = 0
    query_recall: float = 0.0  # summed over searching episodes: share of the shopper's query words typed
    query_precision: float = 0.0  # share of the typed words that are the shopper's
    won_exact: int = 0
    clicked: int = 0  # episodes with a click on a results page
    click_on_page: int = 0  # that click names an id of the page
    click_first: int = 0  # ... the page's first result
    click_shopper: int = 0  # ... the product the shopper opens from that page
    not_on_page: int = 0  # episodes with a click on an id the page does not show
    repeated_not_on_page: int = 0  # ... followed at once by the same click
    bought: int = 0
    turns: int = 0
    notes: list[str] = field(default_factory=list)


def run_env_kwargs(file: Path) -> dict[str, Any]:
    """``env.kwargs`` of the run that wrote ``file`` (its ``.hydra/config.yaml``, looked for beside the
    file and one and two folders up); ``{}`` when there is none."""
    for folder in (file.parent, file.parent.parent, file.parent.parent.parent):
        config = folder / ".hydra" / "config.yaml"
        if config.is_file():
            cfg = OmegaConf.load(config)
            if str(OmegaConf.select(cfg, "env.name")) != "webshop":
                raise ValueError(f"{file}: its run played env {OmegaConf.select(cfg, 'env.name')!r}, not webshop")
            kwargs = OmegaConf.to_container(OmegaConf.select(cfg, "env.kwargs") or {}, resolve=False)
            return {k: v for k, v in dict(kwargs).items() if not (isinstance(v, str) and "${" in v)}
    return {}


def _first(turns: list[dict], pattern: re.Pattern, start: int = 0) -> tuple[int, str] | None:
    for i in range(start, len(turns)):
        match = pattern.match(attempted_command(turns[i]).strip())
        if match:
            return i, match.group(1).strip()
    return None


def episode_links(row: dict, env) -> dict[str, Any]:
    """One episode's links against the shopper, with ``env`` reset to its goal: ``query`` (typed, or
    None), ``shopper_query``, ``click`` (the first product click on a results page: ``on_page``,
    ``first``, ``shopper``), ``not_on_page`` and ``repeated`` (a click the page does not show, and the
    same again next turn), ``bought``."""
    env.reset(int(row["seed"]))
    turns = row.get("turn_log") or []
    shopper_query = goal_query(env.goal)
    found = _first(turns, _SEARCH)
    links: dict[str, Any] = {"query": found[1] if found else None, "shopper_query": shopper_query, "click": None,
                             "not_on_page": False, "repeated": False,
                             "bought": any(attempted_command(t).strip().lower() == BUY for t in turns)}
    for i, turn in enumerate(turns):
        observation = str(turn.get("observation") or "")
        match = _CLICK.match(attempted_command(turn).strip())
        if not match or not observation.lstrip().startswith(("Results page", NOT_ON_PAGE)):
            continue
        target = match.group(1).strip().upper()
        ids = _RESULT_LINE.findall(observation)
        if not re.fullmatch(r"[A-Z0-9]{10}", target):
            continue  # next >, < prev, back to search
        if target not in ids:
            links["not_on_page"] = True
            if i + 1 < len(turns) and attempted_command(turns[i + 1]).strip().upper() == attempted_command(turn).strip().upper():
                links["repeated"] = True
        if links["click"] is None:
            shopper = None
            page_query = _query_of_page(turns, i)
            if page_query is not None and ids:
                env.reset(int(row["seed"]))
                env.step(f"search[{page_query}]")
                on_page = [a for a in env.results if a in ids]
                best = _best_on(env, on_page)
                shopper = best
            links["click"] = {"on_page": target in ids, "first": bool(ids) and target == ids[0],
                              "shopper": shopper is not None and target == shopper}
    return links


def _query_of_page(turns: list[dict], i: int) -> str | None:
    """The query of the search that led to turn ``i``'s results page (the last search before it)."""
    for j in range(i - 1, -1, -1):
        match = _SEARCH.match(attempted_command(turns[j]).strip())
        if match:
            return match.group(1).strip()
    return None


def _best_on(env, asins: list[str]) -> str | None:
    best, best_score = None, -1.0
    for asin in asins:
        score = predicted_score(env.shop.by_asin[asin], env.goal)
        if score > best_score + 1e-12:
            best, best_score = asin, score
    return best


def summarise(path: Path, env_kwargs: dict[str, Any] | None = None) -> ShoppingSummary:
    """The links of every episode of one episodes file (``path`` as
    :func:`arl.analysis.errors.episodes_path`), replayed in a WebShop env built with ``env_kwargs``
    (default: the writing run's, :func:`run_env_kwargs`). Raises ``ValueError`` when the file has no turns."""
    file = episodes_path(path)
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if not r.get("env_error")]
    if rows and not any(r.get("turn_log") for r in rows):
        raise ValueError(f"{file}: the episodes have no turn_log (archives drop it unless KEEP_TURNS=1)")
    kwargs = run_env_kwargs(file) if env_kwargs is None else dict(env_kwargs)
    env = WebShopEnv(**kwargs)
    out = ShoppingSummary()
    for row in rows:
        links = episode_links(row, env)
        out.episodes += 1
        out.won += bool(row.get("won"))
        out.score += float(row.get("score") or 0.0)
        out.turns += len(row.get("turn_log") or [])
        if links["query"] is not None:
            typed, wanted = links["query"].lower().split(), links["shopper_query"].split()
            out.searched += 1
            exact = typed == wanted
            out.query_exact += exact
            out.won_exact += exact and bool(row.get("won"))
            out.query_recall += len(set(typed) & set(wanted)) / max(1, len(set(wanted)))
            out.query_precision += len(set(typed) & set(wanted)) / max(1, len(set(typed)))
        click = links["click"]
        if click is not None:
            out.clicked += 1
            out.click_on_page += click["on_page"]
            out.click_first += click["first"]
            out.click_shopper += click["shopper"]
        out.not_on_page += links["not_on_page"]
        out.repeated_not_on_page += links["repeated"]
        out.bought += links["bought"]
    return out


def shopping_table(summaries: dict[str, ShoppingSummary]) -> str:
    """A markdown table, one column per input: each link of the shopping chain and where it broke."""
    table = ColumnTable(summaries)
    row = table.row
    row("episodes", lambda s: str(s.episodes))
    row("won (score 1)", lambda s: share(s.won, s.episodes))
    row("score (mean reward x 100)", lambda s: f"{100 * s.score / s.episodes:.1f}" if s.episodes else "-")
    row("searched", lambda s: share(s.searched, s.episodes))
    row("query = the shopper's", lambda s: share(s.query_exact, s.searched))
    row("shopper's query words typed (mean)", lambda s: f"{s.query_recall / s.searched:.3f}" if s.searched else "-")
    row("typed words that are the shopper's (mean)",
        lambda s: f"{s.query_precision / s.searched:.3f}" if s.searched else "-")
    row("won, when the query was the shopper's", lambda s: share(s.won_exact, s.query_exact))
    row("won, when it was another", lambda s: share(s.won - s.won_exact, s.searched - s.query_exact))
    row("clicked a product id", lambda s: share(s.clicked, s.episodes))
    row("first click: an id of the page", lambda s: share(s.click_on_page, s.clicked))
    row("first click: the first result", lambda s: share(s.click_first, s.clicked))
    row("first click: the shopper's choice", lambda s: share(s.click_shopper, s.clicked))
    row("an id not on the page", lambda s: share(s.not_on_page, s.episodes))
    row("... clicked again at once", lambda s: share(s.repeated_not_on_page, s.not_on_page))
    row("bought", lambda s: share(s.bought, s.episodes))
    note = ("\n'the shopper': the scripted expert (arl.envs.webshop.expert) on the same goal; its query drops the "
            "price clause and filler words; its choice on a page is the product with the best predicted score.\n")
    return table.markdown(note)
