"""Shopping goals: :class:`Goal`, the generated default, WebShop's goal files, the split.

A goal is what the reference's ``get_human_goals`` / ``get_synthetic_goals`` produce: the target
ASIN, the instruction text (ending ``, and price lower than X dollars`` when a bound applies), the
wanted attributes and options, the price bound, and the target's name, query and category path
(used by the type reward).

Sources:

* :func:`generate_goals`: goals for a (generated) catalogue in the human-goal shape: one to three
  of the product's attributes, one value per option dimension, a price bound, and an instruction
  in the style of WebShop's human instructions. Deterministic in ``seed``.
* :func:`human_goals`: from ``items_human_ins.json`` (ASIN -> list of ``{"instruction",
  "instruction_attributes", "instruction_options", ...}``), as the reference (goals with no
  attributes are skipped).
* :func:`synthetic_goals`: from ``items_ins_v2*.json`` instructions, one goal per combination of
  the product's option values, as the reference.

Goal order: the list is shuffled with ``random.Random(233)`` (the reference seeds the global
generator with 233 before shuffling) and split as in verl-agent: goals ``0..499`` are the test
split, the rest train (:func:`split_indices`).
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arl.envs.webshop.catalogue import Product, read_json
from arl.envs.webshop.vocabulary import INSTRUCTION_TEMPLATES, PRODUCT_TYPES

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_BOUND = 1_000_000.0
SHUFFLE_SEED = 233
TEST_GOALS = 500
SPLITS = ("auto", "train", "test", "all")


@dataclass(frozen=True)
class Goal:
    """One shopping task.

    Attributes:
        asin: the target product.
        instruction_text: what the shopper is asked (the prompt's task).
        attributes: the wanted attributes.
        goal_options: the wanted option values.
        price_upper: the price bound (``1000000`` when none is stated).
        name: the target's title (the type reward compares titles with it).
        query: the target's listing query.
        category: the target's top-level category.
        product_category: the target's category path.
        weight: sampling weight (1 for human goals; attribute rarity for synthetic ones).
        option_names: the option name of each goal option when known (synthetic and generated
            goals), else ``None``.
    """

    asin: str
    instruction_text: str
    attributes: tuple[str, ...]
    goal_options: tuple[str, ...]
    price_upper: float
    name: str
    query: str
    category: str
    product_category: str
    weight: float = 1.0
    option_names: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The reference's goal dict (``goal_options`` a dict when option names are known)."""
        options: Any = list(self.goal_options)
        if self.option_names is not None:
            options = dict(zip(self.option_names, self.goal_options))
        return {
            "asin": self.asin,
            "category": self.category,
            "query": self.query,
            "name": self.name,
            "product_category": self.product_category,
            "instruction_text": self.instruction_text,
            "attributes": list(self.attributes),
            "price_upper": self.price_upper,
            "goal_options": options,
            "weight": self.weight,
        }


# --- price bound ------------------------------------------------------------------------------
def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """``(price_upper, text)`` as the reference: of the first four multiples of 10 above the price,
    two are drawn and the larger is the bound; with fewer than two, no bound (``1000000``, "")."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND, ""
    upper = max(rng.sample(candidates, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def _goal_from_product(product: Product, instruction: str, attributes: Sequence[str], options: Sequence[str],
                       price_upper: float, option_names: Sequence[str] | None = None) -> Goal:
    """The goal of buying ``product`` as ``instruction`` asks, with weight 1 (synthetic goals get their
    rarity weight afterwards)."""
    return Goal(
        asin=product.asin,
        instruction_text=instruction,
        attributes=tuple(attributes),
        goal_options=tuple(options),
        price_upper=float(price_upper),
        name=product.title,
        query=product.query,
        category=product.category,
        product_category=product.product_category,
        option_names=tuple(option_names) if option_names is not None else None,
    )


# --- WebShop's goal files ---------------------------------------------------------------------
def load_human_instructions(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """``items_human_ins.json``: ASIN -> list of human instructions (``instruction``,
    ``instruction_attributes``, ``instruction_options``)."""
    data = read_json(path, "human instructions (items_human_ins)")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object ASIN -> instructions, got {type(data).__name__}")
    return {str(k).upper(): [e for e in (v or []) if isinstance(e, dict)] for k, v in data.items()}


def load_instruction_texts(path: str | Path) -> list[str]:
    """``human_goals.json`` of the reference baselines: a list of human instruction strings."""
    data = read_json(path, "human goal texts (human_goals)")
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of instructions, got {type(data).__name__}")
    return [str(x) for x in data]


def load_goal_query_map(path: str | Path) -> dict[str, list[str]]:
    """``goal_query_map.json``: human instruction -> the search queries people typed for it."""
    data = read_json(path, "goal-query map (goal_query_map)")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object instruction -> queries, got {type(data).__name__}")
    return {str(k): [str(q) for q in (v if isinstance(v, list) else [v])] for k, v in data.items()}


def human_goals(products: Iterable[Product], instructions: dict[str, list[dict[str, Any]]], seed: int = 0) -> list[Goal]:
    """The reference's ``get_human_goals``: one goal per human instruction of a catalogue product
    (instructions without attributes are skipped); price bounds drawn per (seed, ASIN, index)."""
    goals = []
    for product in products:
        for k, entry in enumerate(instructions.get(product.asin, ())):
            attributes = [str(a) for a in entry.get("instruction_attributes") or ()]
            if not attributes:
                continue
            upper, price_text = price_bound(product.price, random.Random(f"webshop-bound/{seed}/{product.asin}/{k}"))
            text = str(entry.get("instruction", "")).strip(".") + price_text
            options = [str(o) for o in entry.get("instruction_options") or ()]
            goals.append(_goal_from_product(product, text, attributes, options, upper))
    return goals


def synthetic_goals(products: Iterable[Product], attributes: dict[str, dict[str, Any]], seed: int = 0) -> list[Goal]:
    """The reference's ``get_synthetic_goals``: for each product with an ``items_ins_v2``
    instruction, one goal per combination of its option values (``instruction with name: value,
    and name: value``); weight = mean over the goal's attributes of 1 / (goals with it)."""
    goals: list[Goal] = []
    counts: dict[str, int] = defaultdict(int)
    for product in products:
        entry = attributes.get(product.asin) or {}
        instruction = entry.get("instruction")
        wanted = [str(a) for a in entry.get("instruction_attributes") or ()]
        if not instruction or not wanted:
            continue
        upper, price_text = price_bound(product.price, random.Random(f"webshop-bound/{seed}/{product.asin}"))
        names = sorted(name for name, _ in product.options)
        values = product.option_dict
        for combination in itertools.product(*(values[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combination))
            option_text = f" with {option_text}" if option_text else ""
            goals.append(
                _goal_from_product(product, f"{instruction}{option_text}{price_text}", wanted, combination, upper,
                                   option_names=names)
            )
            for a in wanted:
                counts[a] += 1
    return [
        Goal(**{**g.__dict__, "weight": sum(1.0 / counts[a] for a in g.attributes) / len(g.attributes)})
        for g in goals
    ]


# --- generated goals --------------------------------------------------------------------------
_OPTION_PHRASES = {
    "color": "{v} color",
    "size": "size {v}",
    "scent": "{v} scent",
    "flavor name": "{v} flavor",
    "style": "style {v}",
}
_NOUN_BY_QUERY = {t.query: t.noun for t in PRODUCT_TYPES}


def _join(words: Sequence[str]) -> str:
    words = list(words)
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _article(noun: str) -> str:
    if noun.endswith("s") and not noun.endswith("ss"):
        return ""
    return "an" if noun[:1] in "aeio" else "a"  # "a usb c charger"


def generated_goal(product: Product, rng: random.Random) -> Goal:
    """One goal for ``product`` in the human-goal shape (see the module docstring)."""
    n_attr = min(len(product.attributes), rng.choice((1, 2, 2, 2, 3)))
    attrs = rng.sample(list(product.attributes), n_attr)
    names, values = [], []
    for name, opts in product.options:
        names.append(name)
        values.append(rng.choice(opts))
    phrases = [_OPTION_PHRASES.get(n, "{v} " + n).format(v=v) for n, v in zip(names, values)]
    opts = f"in {_join(phrases)}" if phrases else ""
    noun = _NOUN_BY_QUERY.get(product.query, product.query or "product")
    template = rng.choice(INSTRUCTION_TEMPLATES)
    text = template.format(article=_article(noun), noun=noun, attrs=_join(attrs), opts=opts)
    text = " ".join(text.split()).rstrip(", ")
    upper, price_text = price_bound(product.price, rng)
    return _goal_from_product(product, text + price_text, attrs, values, upper, option_names=names)


def generate_goals(products: Sequence[Product], seed: int = 0, goals_per_product: int = 2) -> list[Goal]:
    """``goals_per_product`` generated goals for every product, in catalogue order (unshuffled)."""
    if goals_per_product < 1:
        raise ValueError("goals_per_product must be >= 1")
    rng = random.Random(f"webshop-goals/{int(seed)}")
    return [generated_goal(p, rng) for p in products for _ in range(goals_per_product)]


# --- order and split --------------------------------------------------------------------------
def shuffle_goals(goals: Sequence[Goal], seed: int = SHUFFLE_SEED) -> list[Goal]:
    """The goals in the reference's fixed shuffled order (``random.Random(233).shuffle``)."""
    out = list(goals)
    random.Random(seed).shuffle(out)
    return out


def split_indices(n_goals: int, split: str, test_goals: int = TEST_GOALS) -> list[int]:
    """Goal indices of ``split``: ``test`` = the first ``test_goals`` (0..499), ``train`` = the
    rest, ``all`` = every goal. Raises when the split would be empty."""
    if split not in ("train", "test", "all"):
        raise ValueError(f"split={split!r} is not valid; valid: train, test, all")
    if split == "all":
        idx = list(range(n_goals))
    elif split == "test":
        idx = list(range(min(test_goals, n_goals)))
    else:
        idx = list(range(test_goals, n_goals))
    if not idx:
        raise ValueError(f"split {split!r} is empty: {n_goals} goals with test_goals={test_goals}")
    return idx
