"""The scripted shopper: the WebShop expert for behaviour cloning.

From the env's current state it answers one action, so it can take over any state:

* search page: ``search[<goal query>]``, the instruction without its price clause and filler words
  (:func:`goal_query`);
* results page: every result of the current search is rated by the score it would reach with
  the best options (:func:`predicted_score`, which reads the product data as a shopper reading its
  page would, without spending steps); it opens the best one (ties: best rank), paging with
  ``next >`` / ``< prev`` to reach it, or searches again when the results hold no perfect match
  and were not found with the goal query (while :data:`RESEARCH_STEPS` steps are left);
* item page: unless the product is a perfect match, goes back when a better result exists, or to
  the search page when the search was not the goal query; otherwise clicks each wanted option value
  not yet selected (:func:`best_options`), then ``buy now`` (at once when only one step is left);
* sub page: ``< prev``.

:func:`expert_response` returns the answer in the policy's format,
``<think>...</think><action>...</action>``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from arl.envs.webshop.catalogue import Product
from arl.envs.webshop.goals import Goal
from arl.envs.webshop.pages import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE
from arl.envs.webshop.reward import (
    EXACT_MATCH_OPTIONS,
    FUZZY_THRESHOLD,
    normalize_color,
    token_set_ratio,
    webshop_score,
)

_PRICE_CLAUSE = re.compile(r",?\s*and price lower than [\d.,]+ dollars", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9][a-z0-9.'\-]*[a-z0-9]|[a-z0-9]")
FILLER = frozenset(
    ["i", "im", "i'm", "id", "i'd", "am", "is", "are", "a", "an", "the", "that", "which", "with", "and", "or", "for", "to", "in", "of", "me", "my", "need", "want", "would", "like", "looking", "find", "buy", "get", "please", "also", "it", "its", "this", "be", "some", "am", "searching", "search", "product", "item", "color", "colour", "size", "flavor", "scent", "style"]
)
MAX_QUERY_WORDS = 20
RESEARCH_STEPS = 6  # steps left needed to go back, search, open, pick options and buy


def goal_query(goal: Goal | str) -> str:
    """The search query the shopper types for ``goal`` (or an instruction text)."""
    text = goal if isinstance(goal, str) else goal.instruction_text
    text = _PRICE_CLAUSE.sub("", text.lower())
    words = [w for w in _WORD.findall(text) if w not in FILLER]
    return " ".join(words[:MAX_QUERY_WORDS]) or "product"


def _option_match_level(value: str, goal: Goal, option_name: str) -> int:
    """2 when ``value`` equals a goal option (after colour normalisation), 1 when it matches one
    fuzzily (not for exact-match options such as size), else 0."""
    value_norm = normalize_color(value)
    goal_norm = [normalize_color(o) for o in goal.goal_options]
    if value_norm in goal_norm or value in goal.goal_options:
        return 2
    if option_name.lower() in EXACT_MATCH_OPTIONS:
        return 0
    return 1 if any(token_set_ratio(g, value_norm) > FUZZY_THRESHOLD for g in goal_norm) else 0


@lru_cache(maxsize=200_000)
def best_options(product: Product, goal: Goal) -> tuple[tuple[str, str], ...]:
    """The option values to select: per option, the value that best matches a goal option
    (exact before fuzzy, page order on ties); options no goal option matches are left alone."""
    chosen = []
    for name, values in product.options:
        best, level = None, 0
        for value in values:
            lv = _option_match_level(value, goal, name)
            if lv > level:
                best, level = value, lv
        if best is not None:
            chosen.append((name, best))
    return tuple(chosen)


@lru_cache(maxsize=200_000)
def predicted_score(product: Product, goal: Goal) -> float:
    """The score of buying ``product`` with :func:`best_options`."""
    return webshop_score(product, goal, dict(best_options(product, goal))).score


def _answer(think: str, action: str) -> str:
    return f"<think>{think}</think><action>{action}</action>"


def _best_result(env: Any) -> tuple[int, str, float] | None:
    """``(rank, asin, predicted score)`` of the best result of the current search."""
    best = None
    for rank, asin in enumerate(env.results):
        score = predicted_score(env.shop.by_asin[asin], env.goal)
        if best is None or score > best[2] + 1e-12:
            best = (rank, asin, score)
            if score >= 1.0 - 1e-9:
                break
    return best


def expert_action(env: Any) -> tuple[str, str]:
    """``(thought, action)`` of the shopper for the env's current state."""
    if env.goal is None:
        raise RuntimeError("reset the environment before asking for the expert's action")
    state, goal = env.state, env.goal
    remaining = env.max_steps - env.steps
    query = goal_query(goal)
    if state.kind == "search":
        return f"search for {query}", f"search[{query}]"
    if state.kind == "sub":
        return "back to the item", f"click[{PREV_PAGE}]"
    if state.kind == "done":
        return "bought", f"click[{BACK_TO_SEARCH}]"
    best = _best_result(env)
    research = state.query != query and remaining >= RESEARCH_STEPS
    if state.kind == "results":
        if best is None or (best[2] < 1.0 - 1e-9 and research):
            return "no good match here, search again", f"click[{BACK_TO_SEARCH}]"
        rank, asin, _ = best
        target_page = rank // env.results_per_page + 1
        current = env.current_results_page()
        if target_page > current:
            return "the best match is further on, next page", f"click[{NEXT_PAGE}]"
        if target_page < current:
            return "the best match is on an earlier page", f"click[{PREV_PAGE}]"
        return f"{asin} matches the task, open it", f"click[{asin}]"  # as the page shows it
    # item page
    product = env.shop.by_asin[state.asin]
    here = predicted_score(product, goal)
    if here < 1.0 - 1e-9:
        if best is not None and best[1] != state.asin and best[2] > here + 1e-9 and remaining > 2:
            return "a better match exists, go back", f"click[{PREV_PAGE}]"
        if research:
            return "not a match, search again", f"click[{BACK_TO_SEARCH}]"
    if remaining > 1:
        selected = state.option_dict
        clickables = set(env.page.clickables)
        for name, value in best_options(product, goal):
            key = " ".join(value.lower().split())
            if selected.get(name) != value and key in clickables:
                return f"select {name} {value}", f"click[{key}]"
    return "the options are set, buy it", f"click[{BUY_NOW}]"


def expert_response(env: Any) -> str:
    """The shopper's answer to the env's current state, in the policy's output format."""
    think, action = expert_action(env)
    return _answer(think, action)
