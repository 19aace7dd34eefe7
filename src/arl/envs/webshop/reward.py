"""The WebShop reward (Yao et al. 2022, section 3.1; reference ``web_agent_site/engine/goal.py``).

For a purchased product y with chosen options, and a goal with attributes U_att, options U_opt
and price bound u_price:

    score = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price])
                   / (|U_att| + |U_opt| + 1)

* attribute match (r_att): a goal attribute counts when one of the product's attributes matches
  it fuzzily (``token_set_ratio > 85``) or it appears verbatim in the title, the features or the
  description (lower case);
* option match (r_opt): each *chosen* option counts when its value matches a goal option: exactly
  for ``size`` options, fuzzily (``> 85``) otherwise, or verbatim in title/features/description;
  colours are first normalised to a base colour name. The count is capped at |U_opt| (the
  reference does not cap, which lets a score exceed 1 when more options are chosen than asked);
* r_price: 1 when the price is within the bound;
* r_type in {0, 0.1, 0.5, 1}: 1 when the product matches the goal's type (same search query, two
  shared category-path levels, or more than 20 % of the goal title's type words in the product
  title), 0.5 when none of these hold, 0.1 when under 10 % of the type words match, 0 when none do.

Deviations from the reference, all in :func:`title_type_words`, :func:`token_set_ratio` and
:func:`normalize_color`: the type words of a title are its content words (stop words, numbers and a
short list of marketing adjectives removed) instead of spaCy's NOUN/PROPN tags; ``token_set_ratio``
is implemented here (the indel-distance definition of thefuzz/rapidfuzz, rounded to an integer as
thefuzz does); colours are found at word boundaries (the reference finds them as substrings, so
``tan`` matched inside ``standard``).

The environment pays ``10 * (score == 1)`` and logs the score (verl-agent / ARLArena).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from arl.envs.webshop.catalogue import Product
from arl.envs.webshop.goals import Goal

FUZZY_THRESHOLD = 85
EXACT_MATCH_OPTIONS = ("size",)

# Base colour names; multi-word names first so that "navy blue" is not read as "blue".
COLOR_SET = (
    "navy blue", "sky blue", "light blue", "dark blue", "royal blue", "light grey", "dark grey",
    "space grey", "light brown", "dark brown", "rose gold", "hot pink", "light pink", "off white",
    "army green", "olive green", "dark green", "light green", "wine red", "burgundy", "black",
    "white", "grey", "gray", "silver", "gold", "red", "green", "blue", "yellow", "orange", "purple",
    "pink", "brown", "beige", "khaki", "tan", "ivory", "cream", "navy", "teal", "turquoise", "coral",
    "maroon", "charcoal", "camel", "multicolor", "clear", "transparent",
)
_COLOR_RES = tuple((c, re.compile(rf"\b{re.escape(c)}\b")) for c in COLOR_SET)

STOPWORDS = frozenset(
    ["a", "an", "the", "and", "or", "of", "for", "with", "in", "on", "at", "to", "by", "from", "as", "is", "are", "be", "it", "its", "this", "that", "these", "those", "i", "im", "me", "my", "we", "our", "you", "your", "he", "she", "they", "them", "his", "her", "their", "not", "no", "nor", "but", "so", "if", "than", "then", "too", "very", "can", "will", "just", "into", "over", "under", "up", "down", "out", "off", "about", "above", "below", "s", "t", "x", "pack", "set", "count", "piece", "pcs", "pc", "oz", "fl", "ounce", "inch", "inches", "ft", "feet", "lb", "lbs", "pound", "pounds"]
)
# Adjectives and marketing words that spaCy does not tag as nouns in product titles.
NON_NOUNS = frozenset(
    ["new", "best", "premium", "classic", "original", "essential", "signature", "deluxe", "pro", "everyday", "great", "good", "high", "low", "soft", "hard", "small", "large", "big", "little", "long", "short", "light", "heavy", "dark", "natural", "easy", "quick", "fast", "slim", "extra", "super", "ultra", "professional", "portable", "compatible", "adjustable", "durable", "lightweight", "waterproof", "breathable", "comfortable", "cute", "simple", "modern", "vintage", "casual", "elegant", "stylish", "mens", "womens", "men's", "women's", "kids", "unisex"]
)

_PROCESS_RE = re.compile(r"[^0-9a-z]+")
_WORD_RE = re.compile(r"[a-z][a-z'\-]*[a-z]|[a-z]")


@dataclass(frozen=True)
class ScoreBreakdown:
    """A purchase's score and its parts (the reference's ``verbose`` info)."""

    score: float
    r_type: float
    r_att: float | None
    r_option: float | None
    r_price: bool
    num_attr_matches: int
    num_option_matches: int
    query_match: bool
    category_match: bool
    title_score: float

    def as_dict(self) -> dict[str, float | bool | None]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --- string similarity ------------------------------------------------------------------------
def full_process(text: str) -> str:
    """Lower case, every run of non-alphanumeric characters to one space, stripped (thefuzz)."""
    return _PROCESS_RE.sub(" ", str(text).lower()).strip()


def lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence of ``a`` and ``b`` (bit-parallel, Allison-Dix)."""
    if not a or not b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    masks: dict[str, int] = {}
    for i, ch in enumerate(a):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for ch in b:
        u = v & masks.get(ch, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def ratio(a: str, b: str) -> float:
    """Normalised indel similarity in [0, 100]: ``100 * 2 * LCS / (len(a) + len(b))``."""
    total = len(a) + len(b)
    if total == 0:
        return 100.0
    return 100.0 * 2 * lcs_length(a, b) / total


@lru_cache(maxsize=65536)
def token_set_ratio(s1: str, s2: str) -> int:
    """thefuzz's ``fuzz.token_set_ratio``: compare the sorted shared tokens with each side's
    remainder; 100 when one token set contains the other; 0 for an empty side."""
    t1, t2 = set(full_process(s1).split()), set(full_process(s2).split())
    if not t1 or not t2:
        return 0
    sect = " ".join(sorted(t1 & t2))
    combined_1 = (sect + " " + " ".join(sorted(t1 - t2))).strip()
    combined_2 = (sect + " " + " ".join(sorted(t2 - t1))).strip()
    scores = [ratio(combined_1, combined_2)]
    if sect:
        scores += [ratio(sect, combined_1), ratio(sect, combined_2)]
    return round(max(scores))  # an int, rounded half to even as thefuzz's int(round(x))


def normalize_color(text: str) -> str:
    """The first base colour named in ``text`` (word boundaries), else ``text`` unchanged."""
    for color, pattern in _COLOR_RES:
        if color in text and pattern.search(text):
            return color
    return text


@lru_cache(maxsize=65536)
def title_type_words(title: str) -> tuple[str, ...]:
    """The words of a title that name the product's type (stand-in for spaCy's noun tags)."""
    words = _WORD_RE.findall(str(title).lower())
    return tuple(w for w in words if w not in STOPWORDS and w not in NON_NOUNS and len(w) > 1)


# --- the reward parts -------------------------------------------------------------------------
def _product_text(product: Product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.features).lower(), product.description.lower()


def type_reward(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)``."""
    query_match = product.query == goal.query
    purchased = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(purchased & wanted) >= 2
    desired = title_type_words(goal.name)
    if not desired:
        title_score = 0.2
    else:
        title_score = len(set(title_type_words(product.title)) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(product: Product, goal_attributes: Sequence[str]) -> int:
    """How many goal attributes the product has (fuzzy attribute match, or verbatim in its text)."""
    title, features, description = _product_text(product)
    count = 0
    for g_attr in goal_attributes:
        if any(token_set_ratio(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in product.attributes) or g_attr in title or g_attr in features or g_attr in description:
            count += 1
    return count


def option_matches(product: Product, goal_options: Sequence[str], chosen: Mapping[str, str]) -> int:
    """How many chosen options match a goal option (capped at ``len(goal_options)``)."""
    goal_norm = [normalize_color(str(o)) for o in goal_options]
    title, features, description = _product_text(product)
    count = 0
    for name, value in chosen.items():
        value_norm = normalize_color(str(value))
        if str(name).lower() in EXACT_MATCH_OPTIONS:
            matched = value_norm in goal_norm
        else:
            matched = any(token_set_ratio(g, value_norm) > FUZZY_THRESHOLD for g in goal_norm)
        if matched or value_norm in title or value_norm in features or value_norm in description:
            count += 1
    return min(count, len(goal_norm))


def webshop_score(product: Product, goal: Goal, chosen: Mapping[str, str] | None = None, price: float | None = None) -> ScoreBreakdown:
    """The WebShop score of buying ``product`` with options ``chosen`` (name -> value) for ``goal``.

    ``price`` defaults to ``product.price``. The score lies in [0, 1]; it is exactly 1.0 when every
    part matches (integer counts divided by the same integer).
    """
    chosen = dict(chosen or {})
    price = product.price if price is None else float(price)
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    n_att = attribute_matches(product, goal.attributes)
    n_opt = option_matches(product, goal.goal_options, chosen)
    r_price = goal.price_upper > 0 and price <= goal.price_upper
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    score = (n_att + n_opt + int(r_price)) / denominator * r_type
    return ScoreBreakdown(
        score=score,
        r_type=r_type,
        r_att=n_att / len(goal.attributes) if goal.attributes else None,
        r_option=n_opt / len(goal.goal_options) if goal.goal_options else None,
        r_price=bool(r_price),
        num_attr_matches=n_att,
        num_option_matches=n_opt,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
    )


def is_success(score: float) -> bool:
    """The episode counts as won: score == 1 (up to float rounding)."""
    return score >= 1.0 - 1e-9
