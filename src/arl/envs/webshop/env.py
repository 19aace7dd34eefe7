"""``WebShopEnv``: the WebShop text environment (TextEnv protocol, docs/design.md sections 4 and 10).

An episode is one shopping goal. The agent starts on the search page, searches with
``search[<query>]``, browses result pages (``click[next >]``, ``click[< prev]``), opens a product
(``click[<asin>]``), picks options (``click[<value>]``), may read its Description / Features /
Reviews, goes back (``click[< prev]``, ``click[back to search]``) and buys (``click[buy now]``).
The episode ends at the purchase or after ``max_steps`` (15) steps.

Rewards (verl-agent / ARLArena): ``10`` when the purchase's WebShop score is 1, else 0; the score
(:func:`arl.envs.webshop.reward.webshop_score`, in [0, 1]) is ``info["score"]`` and
``info["won"] = score == 1``. An episode that ends without a purchase scores 0.

Admissibility. ``info["admissible_actions"]`` lists the page's actions as verl-agent shows them:
``search[<your query>]`` (a template: any query) on the search page and ``click[<clickable>]`` for
every clickable. Because a search query is free text, the spec has ``check_admissible=False``:
the environment validates every action itself. Matching is case and white-space insensitive.
An action that is not ``search[...]``/``click[...]``, a search anywhere but on the search page, a
search whose query has no searchable character, or a click on something the page does not show
is an invalid action: the page does not change, the step counts, the observation starts with
``Invalid action: <reason>.``, and ``info["action_valid"]`` is false with ``info["invalid_reason"]``.
The agent loop's fallback for unparsable output, ``noop``, is such an action.
"""

from __future__ import annotations

import re
from typing import Any

from arl.envs.base import VAL_SEED_BASE, EnvSpec, StepResult
from arl.envs.webshop.goals import SPLITS, TEST_GOALS, Goal, split_indices
from arl.envs.webshop.pages import (
    BACK_TO_SEARCH,
    BUY_NOW,
    NEXT_PAGE,
    PREV_PAGE,
    STYLES,
    SUB_PAGES,
    Page,
    PageState,
    num_pages,
    render_page,
)
from arl.envs.webshop.prompt import render_compact_prompt, render_prompt
from arl.envs.webshop.reward import ScoreBreakdown, is_success, webshop_score
from arl.envs.webshop.shop import Shop, load_shop, resolve_paths

WIN_REWARD = 10.0
MAX_STEPS = 15
COMPACT_RESULTS_PER_PAGE = 5  # compact pages stay within a few hundred tokens
MAX_ACTION_CHARS = 2000  # longer actions are invalid before any parsing
_ACTION_RE = re.compile(r"\s*(search|click)\s*\[(.*)\]\s*", re.IGNORECASE | re.DOTALL)


def parse_action(action: Any) -> tuple[str, str] | tuple[None, str]:
    """``("search"|"click", argument)`` for a well-formed action, else ``(None, reason)``.

    The name is case-insensitive; the argument is everything between the first ``[`` and the
    last ``]`` (so option values with brackets survive), white space collapsed.
    """
    if not isinstance(action, str):
        return None, "action is not text"
    if len(action) > MAX_ACTION_CHARS:
        return None, "action too long"
    match = _ACTION_RE.fullmatch(action)
    if match is None:
        return None, "use search[...] or click[...]"
    name, arg = match.group(1).lower(), match.group(2)
    arg = "".join(ch if ch.isprintable() else " " for ch in arg)
    return name, " ".join(arg.split())


def goal_index(seed: int, n_goals: int, split: str, test_goals: int = TEST_GOALS) -> int:
    """The goal played by ``reset(seed)``.

    ``split="auto"`` (default): validation seeds (``>= 2**30``, see
    ``arl.datamodules.rollout_datamodule``) play the test goals (0..499), other seeds the train
    goals (500..); ``train``/``test``/``all`` use that split for every seed. Within a split the
    goal is ``split[seed % len(split)]``.
    """
    seed = int(seed)
    if split == "auto":
        if seed >= VAL_SEED_BASE:
            split, seed = "test", seed - VAL_SEED_BASE
        else:
            split = "train"
    idx = split_indices(n_goals, split, test_goals)
    return idx[seed % len(idx)]


class WebShopEnv:
    """WebShop as a multi-turn text environment.

    Args:
        max_steps: steps per episode (invalid actions count); the episode ends after it.
        split: which goals ``reset(seed)`` plays (:func:`goal_index`): auto, train, test, all.
        test_goals: size of the test split (the first goals; the reference uses 500).
        prompt_style: ``full`` (the reference prompt and page text) or ``compact`` (short pages
            and prompt for the embedded tiny model).
        results_per_page: products per results page; default 10 (the reference) for ``full``,
            :data:`COMPACT_RESULTS_PER_PAGE` for ``compact``.
        catalogue_seed, n_products, goals_per_product: the generated catalogue and goals.
        data_dir: a folder with WebShop's files under their usual names (``items_shuffle_1000.json``,
            ``items_ins_v2_1000.json``, ``items_human_ins.json``); used instead of the generated
            catalogue.
        products_path, attributes_path, human_goals_path: the files one by one (override data_dir).
        goals: goal source: ``auto`` (human goals when the file is there, else synthetic goals
            for WebShop's files; generated goals for the generated catalogue), ``human``,
            ``synthetic``, ``generated``.
        num_products: keep the first N products of the product file (the reference's option).
    """

    def __init__(
        self,
        *,
        max_steps: int = MAX_STEPS,
        split: str = "auto",
        test_goals: int = TEST_GOALS,
        prompt_style: str = "full",
        results_per_page: int | None = None,
        catalogue_seed: int = 0,
        n_products: int = 1000,
        goals_per_product: int = 2,
        data_dir: str | None = None,
        products_path: str | None = None,
        attributes_path: str | None = None,
        human_goals_path: str | None = None,
        goals: str = "auto",
        num_products: int | None = None,
    ):
        results_per_page = self._check_args(max_steps, split, prompt_style, results_per_page)
        self.max_steps = int(max_steps)
        self.split = split
        self.test_goals = int(test_goals)
        self.prompt_style = prompt_style
        self.results_per_page = int(results_per_page)
        self.shop: Shop = load_shop(
            resolve_paths(data_dir, products_path, attributes_path, human_goals_path),
            goals=goals,
            num_products=None if num_products is None else int(num_products),
            catalogue_seed=int(catalogue_seed),
            n_products=int(n_products),
            goals_per_product=int(goals_per_product),
        )
        self.spec = EnvSpec(
            name="webshop",
            max_turns=self.max_steps,
            invalid_action="noop",
            render_prompt=render_prompt if prompt_style == "full" else render_compact_prompt,
            check_admissible=False,
            graded=True,
        )
        self._clear_episode()

    @staticmethod
    def _check_args(max_steps: int, split: str, prompt_style: str, results_per_page: int | None) -> int:
        """Raise ``ValueError`` for an argument out of its range; returns the results per page (the
        prompt style's default when None)."""
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not valid; valid: {', '.join(SPLITS)}")
        if prompt_style not in STYLES:
            raise ValueError(f"prompt_style={prompt_style!r} is not valid; valid: {', '.join(STYLES)}")
        if results_per_page is None:
            results_per_page = 10 if prompt_style == "full" else COMPACT_RESULTS_PER_PAGE
        if int(results_per_page) < 1:
            raise ValueError("results_per_page must be >= 1")
        return int(results_per_page)

    def _clear_episode(self) -> None:
        """No task drawn yet: the episode's state empty."""
        self.goal: Goal | None = None
        self.goal_idx = -1
        self.state = PageState()
        self.results: list[str] = []
        self.steps = 0
        self.done = False
        self.score = 0.0
        self.breakdown: ScoreBreakdown | None = None
        self._page: Page | None = None

    # --- TextEnv ---------------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        idx = goal_index(seed, len(self.shop.goals), self.split, self.test_goals)
        return self.reset_to_goal(self.shop.goals[idx], idx)

    def reset_to_goal(self, goal: Goal, goal_idx: int = -1) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``goal`` (tests, evaluation on hand-made goals)."""
        if goal.asin not in self.shop.by_asin:
            raise KeyError(f"goal target {goal.asin} is not in the catalogue")
        self.goal, self.goal_idx = goal, goal_idx
        self.state = PageState()
        self.results = []
        self.steps = 0
        self.done = False
        self.score = 0.0
        self.breakdown = None
        page = self._render()
        return page.text, self._info(page, True, "")

    def step(self, action: str) -> StepResult:
        if self.goal is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            page = self._render()
            return StepResult(page.text, 0.0, True, self._info(page, False, "episode is over"))
        self.steps += 1
        reason = self._apply(action)
        reward = 0.0
        if self.state.kind == "done":
            self.done = True
            reward = WIN_REWARD if is_success(self.score) else 0.0
        elif self.steps >= self.max_steps:
            self.done = True
        page = self._render()
        obs = page.text if not reason else f"Invalid action: {reason}.\n{page.text}"
        return StepResult(obs, reward, self.done, self._info(page, not reason, reason))

    def close(self) -> None:
        pass

    # --- helpers for experts and tests -----------------------------------------------------
    @property
    def page(self) -> Page:
        """The current page (rendered on demand)."""
        return self._render()

    def results_page_asins(self) -> list[str]:
        """ASINs shown on the current results page (empty elsewhere)."""
        if self.state.kind != "results":
            return []
        start = (self.current_results_page() - 1) * self.results_per_page
        return self.results[start: start + self.results_per_page]

    def current_results_page(self) -> int:
        """The results page number, clamped to the pages that exist."""
        return min(max(1, self.state.page), num_pages(len(self.results), self.results_per_page))

    # --- internals -------------------------------------------------------------------------
    def _render(self) -> Page:
        self._page = render_page(self.state, self.results, self.shop.by_asin, self.prompt_style,
                                 self.results_per_page, self.score if self.state.kind == "done" else None)
        return self._page

    def _apply(self, action: Any) -> str:
        """Apply one action; returns "" when valid, else why it is invalid (state unchanged)."""
        name, arg = parse_action(action)
        if name is None:
            return arg
        page = self._page if self._page is not None else self._render()
        state = self.state
        if name == "search":
            if not page.has_search_bar:
                return "search is only available on the search page; click[back to search] first"
            if not any(ch.isalnum() for ch in arg):
                return "empty search query"
            self.results = self.shop.index.search(arg)
            self.state = PageState("results", query=arg, page=1)
            return ""
        target = arg.lower()
        if target not in page.clickables:
            return "click target not on this page" if target else "empty click target"
        if target == BACK_TO_SEARCH:
            self.state, self.results = PageState(), []
        elif target == NEXT_PAGE:
            self.state = PageState("results", query=state.query, page=self.current_results_page() + 1)
        elif target == PREV_PAGE:
            if state.kind == "results":
                self.state = PageState("results", query=state.query, page=self.current_results_page() - 1)
            elif state.kind == "item":
                self.state = PageState("results", query=state.query, page=state.page)
            else:  # sub page -> its item page
                self.state = PageState("item", query=state.query, page=state.page, asin=state.asin,
                                       options=state.options)
        elif target in SUB_PAGES and state.kind == "item":
            self.state = PageState("sub", query=state.query, page=state.page, asin=state.asin,
                                   options=state.options, sub=target)
        elif target == BUY_NOW:
            self.breakdown = webshop_score(self.shop.by_asin[state.asin], self.goal, state.option_dict)
            self.score = self.breakdown.score
            self.state = PageState("done", query=state.query, page=state.page, asin=state.asin,
                                   options=state.options)
        elif state.kind == "results":
            self.state = PageState("item", query=state.query, page=self.current_results_page(),
                                   asin=target.upper())
        else:  # an option value of the item page
            option_name, value = page.option_targets[target]
            self.state = state.with_option(option_name, value)
        return ""

    def _info(self, page: Page, valid: bool, reason: str) -> dict[str, Any]:
        goal = self.goal
        info: dict[str, Any] = {
            "task": goal.instruction_text,
            "task_type": goal.category or "webshop",
            "admissible_actions": page.admissible_actions,
            "won": bool(self.done and is_success(self.score)),
            "score": float(self.score),
            "anchor": page.text,
            "steps": self.steps,
            "max_steps": self.max_steps,
            "page": self.state.kind,
            "action_valid": bool(valid),
            "invalid_reason": reason,
        }
        if self.breakdown is not None:
            info["score_breakdown"] = self.breakdown.as_dict()
        return info
