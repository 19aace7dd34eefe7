"""Pages of the WebShop site as text: the state of a session and how each page renders.

Five pages, as the reference site: search, results (10 per page, up to 50 results), item (options,
title, price, rating, Description / Features / Reviews, Buy Now), an item's sub page, and the
done page after a purchase. Each render returns the observation text and the page's clickables
(lower case, as the reference's ``get_available_actions``); the admissible actions are
``search[<your query>]`` on the search page and ``click[<clickable>]`` for each clickable.

Two styles:

* ``full``: the reference's ``observation_mode='text'`` page text, parts joined by `` [SEP] ``
  (the instruction is not repeated in it: the prompt carries it, as verl-agent's reformatting).
  Selected options are shown as a ``Selected: name: value`` part after the options, so that the
  page text alone tells two states apart.
* ``compact``: one line per result, titles cut to :data:`COMPACT_TITLE_WORDS` words, sub pages cut
  to :data:`COMPACT_TEXT_WORDS` words; for small models with short contexts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from arl.envs.webshop.catalogue import Product

BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BUY_NOW = "buy now"
SUB_PAGES = ("description", "features", "reviews")
BUTTONS = frozenset((BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW, "search", *SUB_PAGES))
SEARCH_ACTION = "search[<your query>]"
SEP = " [SEP] "
STYLES = ("full", "compact")
COMPACT_TITLE_WORDS = 10
COMPACT_TEXT_WORDS = 40


@dataclass(frozen=True)
class PageState:
    """Where a session is.

    Attributes:
        kind: ``search``, ``results``, ``item``, ``sub`` or ``done``.
        query: the current search query (results and below).
        page: the results page (1-based).
        asin: the open product (item, sub, done).
        options: the selected options as ``(name, value)`` pairs in selection order.
        sub: the open sub page (``description``, ``features``, ``reviews``).
    """

    kind: str = "search"
    query: str = ""
    page: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()
    sub: str = ""

    def with_option(self, name: str, value: str) -> PageState:
        """This state with option ``name`` set to ``value`` (replacing an earlier choice)."""
        kept = tuple((n, v) for n, v in self.options if n != name)
        return replace(self, options=kept + ((name, value),))

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)


@dataclass(frozen=True)
class Page:
    """A rendered page: its text, its clickables, and whether it has the search bar."""

    text: str
    clickables: tuple[str, ...] = ()
    has_search_bar: bool = False
    option_targets: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # clickable -> (name, value)

    @property
    def admissible_actions(self) -> list[str]:
        """``search[<your query>]`` on the search page, then ``click[...]`` per clickable."""
        actions = [SEARCH_ACTION] if self.has_search_bar else []
        return actions + [f"click[{c}]" for c in self.clickables]


def num_pages(total: int, per_page: int) -> int:
    """Pages needed for ``total`` results (at least 1)."""
    return max(1, -(-int(total) // max(1, int(per_page))))


def _cut(text: str, words: int) -> str:
    parts = str(text).split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def _oneline(text: str) -> str:
    return " ".join(str(text).split())


def render_page(
    state: PageState,
    results: Sequence[str],
    products: Mapping[str, Product],
    style: str = "full",
    per_page: int = 10,
    score: float | None = None,
) -> Page:
    """Render ``state``.

    Args:
        state: the session state.
        results: the ASINs of the current search, best first.
        products: ASIN -> product.
        style: ``full`` or ``compact``.
        per_page: results per page.
        score: the purchase score (done page).
    """
    if style not in STYLES:
        raise ValueError(f"style={style!r} is not valid; valid: {', '.join(STYLES)}")
    compact = style == "compact"
    if state.kind == "search":
        return Page("Search page." if compact else "Search", (), has_search_bar=True)
    if state.kind == "results":
        return _results_page(state, results, products, compact, per_page)
    if state.kind == "item":
        return _item_page(state, products[state.asin], compact)
    if state.kind == "sub":
        return _sub_page(state, products[state.asin], compact)
    if state.kind == "done":
        value = 0.0 if score is None else round(float(score), 4)
        if compact:
            return Page(f"Bought {state.asin}. Score: {value}.")
        return Page(SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(value)]))
    raise ValueError(f"unknown page kind {state.kind!r}")


def _results_page(state: PageState, results: Sequence[str], products: Mapping[str, Product], compact: bool,
                  per_page: int) -> Page:
    total = len(results)
    pages = num_pages(total, per_page)
    page = min(max(1, state.page), pages)
    shown = [products[a] for a in results[(page - 1) * per_page: page * per_page]]
    buttons = [BACK_TO_SEARCH]
    if page > 1:
        buttons.append(PREV_PAGE)
    if page * per_page < total:
        buttons.append(NEXT_PAGE)
    clickables = tuple(buttons + [p.asin.lower() for p in shown])
    if compact:
        head = f"Results page {page}/{pages} ({total} found):" if total else "No products found."
        lines = [head] + [f"{p.asin}: {_cut(_oneline(p.title), COMPACT_TITLE_WORDS)} | {p.price_tag}" for p in shown]
        return Page("\n".join(lines), clickables)
    parts = ["Back to Search", f"Page {page} (Total results: {total})"]
    if page > 1:
        parts.append("< Prev")
    if page * per_page < total:
        parts.append("Next >")
    for p in shown:
        parts += [p.asin, _oneline(p.title), p.price_tag]
    return Page(SEP.join(parts), clickables)


def _item_page(state: PageState, product: Product, compact: bool) -> Page:
    clickables = [BACK_TO_SEARCH, PREV_PAGE]
    targets: dict[str, tuple[str, str]] = {}
    for name, values in product.options:
        for value in values:
            key = " ".join(value.lower().split())
            if key and key not in BUTTONS and key not in targets and key != product.asin.lower():
                targets[key] = (name, value)
    clickables += list(targets)
    clickables += [*SUB_PAGES, BUY_NOW]
    selected = ", ".join(f"{n}: {v}" for n, v in state.options)
    if compact:
        lines = [f"Item {product.asin}: {_cut(_oneline(product.title), 2 * COMPACT_TITLE_WORDS)} | {product.price_tag}"]
        lines += [f"{name}: {', '.join(values)}" for name, values in product.options]
        if selected:
            lines.append(f"Selected: {selected}")
        return Page("\n".join(lines), tuple(clickables), option_targets=targets)
    parts = ["Back to Search", "< Prev"]
    for name, values in product.options:
        parts += [name, *values]
    if selected:
        parts.append(f"Selected: {selected}")
    parts += [_oneline(product.title), f"Price: {product.price_tag}", f"Rating: {product.rating}",
              "Description", "Features", "Reviews", "Buy Now"]
    return Page(SEP.join(parts), tuple(clickables), option_targets=targets)


def _sub_page(state: PageState, product: Product, compact: bool) -> Page:
    clickables = (BACK_TO_SEARCH, PREV_PAGE)
    if state.sub == "description":
        body = [_oneline(product.description)] if product.description.strip() else []
    elif state.sub == "features":
        body = [_oneline(f) for f in product.features if f.strip()]
    else:
        body = [_oneline(r) for r in product.reviews if r.strip()]
    if compact:
        text = _cut("; ".join(body), COMPACT_TEXT_WORDS) if body else "none"
        return Page(f"{state.sub.capitalize()} of {product.asin}: {text}", clickables)
    return Page(SEP.join(["Back to Search", "< Prev", *body]), clickables)
