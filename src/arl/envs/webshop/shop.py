"""A shop: catalogue, goals in their fixed order, and the search index, built once per process.

The agent loop builds one environment per episode, so everything expensive lives here and is
cached per source (:func:`load_shop`): environments with the same data share one shop.

Sources, by precedence:

1. ``products_path`` (``items_shuffle*.json``), or ``data_dir`` holding WebShop's files under
   their usual names (:data:`PRODUCT_FILES`, :data:`ATTRIBUTE_FILES`, :data:`HUMAN_GOAL_FILES`);
   attributes from ``attributes_path`` (``items_ins_v2*.json``); goals from
   ``human_goals_path`` (``items_human_ins.json``) when given or found, else the synthetic goals
   of the attribute file.
2. Otherwise the generated catalogue (``catalogue_seed``, ``n_products``) and its generated goals
   (``goals_per_product`` per product).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from arl.envs.webshop.catalogue import Product, generate_catalogue, load_attributes, load_products
from arl.envs.webshop.goals import (
    Goal,
    generate_goals,
    human_goals,
    load_human_instructions,
    shuffle_goals,
    synthetic_goals,
)
from arl.envs.webshop.search import SearchIndex

PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_GOAL_FILES = ("items_human_ins.json",)
GOAL_SOURCES = ("auto", "generated", "human", "synthetic")


@dataclass
class Shop:
    """Everything the environments of one data source share."""

    products: list[Product]
    goals: list[Goal]
    source: str
    by_asin: dict[str, Product] = field(default_factory=dict)
    _index: SearchIndex | None = None

    def __post_init__(self):
        self.by_asin = {p.asin: p for p in self.products}

    @property
    def index(self) -> SearchIndex:
        """The BM25 index (built on first use)."""
        if self._index is None:
            self._index = SearchIndex(self.products)
        return self._index


def _first_existing(folder: Path, names: tuple[str, ...]) -> Path | None:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def resolve_paths(data_dir: str | None, products_path: str | None, attributes_path: str | None,
                  human_goals_path: str | None) -> tuple[str | None, str | None, str | None]:
    """Explicit paths, else WebShop's usual file names inside ``data_dir``. A ``data_dir``
    without a product file raises ``FileNotFoundError`` naming the names it looked for."""
    if data_dir:
        folder = Path(data_dir).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"WebShop data_dir not found: {folder}")
        if products_path is None:
            found = _first_existing(folder, PRODUCT_FILES)
            if found is None:
                raise FileNotFoundError(
                    f"no WebShop product file in {folder}: looked for {', '.join(PRODUCT_FILES)}"
                )
            products_path = str(found)
        if attributes_path is None:
            found = _first_existing(folder, ATTRIBUTE_FILES)
            attributes_path = str(found) if found else None
        if human_goals_path is None:
            found = _first_existing(folder, HUMAN_GOAL_FILES)
            human_goals_path = str(found) if found else None
    return products_path, attributes_path, human_goals_path


@lru_cache(maxsize=8)
def load_shop(
    paths: tuple[str | None, str | None, str | None] = (None, None, None),
    goals: str = "auto",
    num_products: int | None = None,
    catalogue_seed: int = 0,
    n_products: int = 1000,
    goals_per_product: int = 2,
) -> Shop:
    """The shop of a data source (cached: the same arguments return the same object).

    ``paths`` are WebShop's products, attributes and human-goals files as :func:`resolve_paths` finds
    them; no products file: the generated catalogue of ``catalogue_seed`` (``n_products`` products,
    ``goals_per_product`` goals each)."""
    products_path, attributes_path, human_goals_path = paths
    if goals not in GOAL_SOURCES:
        raise ValueError(f"goals={goals!r} is not valid; valid: {', '.join(GOAL_SOURCES)}")
    if products_path is None:
        if goals not in ("auto", "generated"):
            raise ValueError(f"goals={goals!r} needs WebShop's files (products_path or data_dir)")
        products = generate_catalogue(catalogue_seed, n_products)
        goal_list = generate_goals(products, catalogue_seed, goals_per_product)
        source = f"generated(seed={catalogue_seed}, n_products={n_products})"
    else:
        attributes = load_attributes(attributes_path) if attributes_path else {}
        products = load_products(products_path, attributes, num_products)
        use_human = goals == "human" or (goals == "auto" and human_goals_path)
        if use_human:
            if not human_goals_path:
                raise ValueError("goals='human' needs human_goals_path (items_human_ins.json)")
            goal_list = human_goals(products, load_human_instructions(human_goals_path))
        elif goals in ("auto", "synthetic"):
            if not attributes:
                raise ValueError("synthetic goals need attributes_path (items_ins_v2*.json)")
            goal_list = synthetic_goals(products, attributes)
        else:
            goal_list = generate_goals(products, catalogue_seed, goals_per_product)
        source = str(products_path)
    known = {p.asin for p in products}
    goal_list = [g for g in goal_list if g.asin in known]
    if not goal_list:
        raise ValueError(f"no goals for the catalogue {source}")
    return Shop(products, shuffle_goals(goal_list), source)
