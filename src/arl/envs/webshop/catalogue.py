"""The product catalogue: :class:`Product`, the generated default, and loaders of WebShop's files.

Two sources:

* :func:`generate_catalogue` (the embedded default): products of 30 types in WebShop's five
  categories, deterministic in ``seed``; titles, attributes, options (size, color, flavor, ...),
  prices and descriptions are drawn from :mod:`arl.envs.webshop.vocabulary`.
* :func:`load_products`: WebShop's product pages (``items_shuffle*.json``: a list of scraped
  products with ``asin``, ``name``, ``pricing``, ``product_category``, ``customization_options``,
  ``full_description``, ``small_description``, ...), cleaned as the reference ``load_products``
  does, with attributes from ``items_ins_v2*.json`` (:func:`load_attributes`).

A product's ``price`` is the one the reward compares with the goal's price bound: the listed price,
or for a price range a point of the range drawn from a generator seeded by the ASIN (the reference
draws it from the global ``random`` state).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from arl.envs.webshop.vocabulary import (
    BRAND_HEADS,
    BRAND_TAILS,
    OPTION_VALUES,
    PRODUCT_TYPES,
    TITLE_EXTRAS,
    ProductType,
)

DUMMY_ATTR = "DUMMY_ATTR"  # the reference's attribute for products the attribute file lacks
DEFAULT_PRICE = 100.0

# Price bands (low, high) of generated products, by category.
PRICE_BANDS = {
    "beauty": (4.0, 45.0),
    "electronics": (7.0, 120.0),
    "fashion": (9.0, 75.0),
    "food": (3.0, 40.0),
    "furniture": (35.0, 420.0),
}
_ASIN_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Product:
    """One product page.

    Attributes:
        asin: the product id (10 characters, upper case), shown on result pages.
        title: the product name (the reference's ``name`` / ``Title``).
        category: top-level category (``beauty``, ``electronics``, ``fashion``, ``food``, ``furniture``).
        query: the search query the product was listed under (lower case).
        product_category: the category path, levels joined by `` › ``.
        description: the full description (the Description sub page).
        features: bullet points (the Features sub page; the reference's ``BulletPoints``).
        pricing: one price, or the low and high end of a range.
        price_tag: the price as shown (``$12.99`` or ``$10.0 to $15.5``).
        price: the price the reward checks against the goal's bound.
        options: ``(name, values)`` pairs in page order; names and values lower case.
        attributes: short attribute phrases (from ``items_ins_v2`` or generated).
        rating: shown on the item page (``N.A.`` when unknown, as in the reference).
        reviews: review texts for the Reviews sub page.
    """

    asin: str
    title: str
    category: str
    query: str
    product_category: str
    description: str
    features: tuple[str, ...]
    pricing: tuple[float, ...]
    price_tag: str
    price: float
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    attributes: tuple[str, ...] = ()
    rating: str = "N.A."
    reviews: tuple[str, ...] = ()

    @property
    def option_dict(self) -> dict[str, tuple[str, ...]]:
        """Option name -> values."""
        return dict(self.options)

    def option_name_of(self, value: str) -> str | None:
        """The (first) option whose values contain ``value``, or ``None``."""
        for name, values in self.options:
            if value in values:
                return name
        return None


# --- loading WebShop's files ------------------------------------------------------------------
def read_json(path: str | Path, what: str) -> Any:
    """``json.load`` of ``path``; a missing file raises ``FileNotFoundError`` naming it and ``what``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"WebShop {what} file not found: {p}")
    with p.open(encoding="utf-8") as f:
        return json.load(f)


def parse_pricing(pricing: Any) -> tuple[tuple[float, ...], str]:
    """WebShop's ``pricing`` string (``"$12.99"``, ``"$10.99$15.99"``, ``"$1,299.00"``) to
    ``(prices, price_tag)`` as the reference cleans it: an empty or missing price is ``$100.0``; a
    range keeps its first two prices and shows ``$lo to $hi``. Unparsable parts are skipped."""
    if isinstance(pricing, (list, tuple)) and pricing and all(isinstance(x, (int, float)) for x in pricing):
        prices = tuple(float(x) for x in pricing[:2])
    elif isinstance(pricing, str) and pricing.strip():
        prices = ()
        for part in pricing.split("$")[1:]:
            digits = re.sub(r"[^\d.]", "", part)
            try:
                prices += (float(Decimal(digits)),)
            except (InvalidOperation, ValueError):
                continue
        prices = prices[:2]
    else:
        prices = ()
    if not prices:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices, f"${prices[0]} to ${prices[1]}"


def sampled_price(asin: str, pricing: tuple[float, ...]) -> float:
    """The price the reward uses: the single price, or a point of the range seeded by ``asin``."""
    if not pricing:
        return DEFAULT_PRICE
    if len(pricing) == 1:
        return float(pricing[0])
    return random.Random(f"webshop-price/{asin}").uniform(float(pricing[0]), float(pricing[1]))


def _option_pairs(customization_options: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``customization_options`` (``{name: [{"value": ..., "image": ...}, ...]}``) to option
    pairs: names lower case, values stripped, lower case, ``/`` shown as `` | `` (the reference)."""
    if not isinstance(customization_options, dict):
        return ()
    pairs = []
    for name, contents in customization_options.items():
        if not contents:
            continue
        values = []
        for content in contents:
            raw = content.get("value") if isinstance(content, dict) else content
            if raw is None:
                continue
            value = str(raw).strip().replace("/", " | ").lower()
            if value and value not in values:
                values.append(value)
        if values:
            pairs.append((str(name).lower(), tuple(values)))
    return tuple(pairs)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)] if str(value).strip() else []


def product_from_record(record: dict[str, Any], attributes: dict[str, Any] | None = None) -> Product | None:
    """One ``items_shuffle`` record to a :class:`Product` (``None`` for the records the reference
    skips: ASIN ``nan`` or longer than 10 characters). Also accepts the reference's cleaned keys
    (``Title``, ``Description``, ``BulletPoints``, ``options``)."""
    asin = str(record.get("asin", "")).strip()
    if not asin or asin == "nan" or len(asin) > 10:
        return None
    title = str(record.get("name", record.get("Title", "")) or "")
    description = str(record.get("full_description", record.get("Description", "")) or "")
    features = _as_list(record.get("small_description", record.get("BulletPoints")))
    pricing, price_tag = parse_pricing(record.get("pricing"))
    if "customization_options" in record:
        options = _option_pairs(record.get("customization_options"))
    else:
        options = tuple(
            (str(k).lower(), tuple(str(v).lower() for v in vals))
            for k, vals in (record.get("options") or {}).items()
            if vals
        )
    entry = (attributes or {}).get(asin) or {}
    attrs = tuple(entry.get("attributes") or ()) if "attributes" in entry else ()
    if not attrs:
        attrs = tuple(record.get("Attributes") or ()) or (DUMMY_ATTR,)
    rating = record.get("average_rating", record.get("Rating", "N.A."))
    reviews = tuple(
        str(r.get("body", r.get("review", ""))) if isinstance(r, dict) else str(r)
        for r in (record.get("Reviews") or record.get("reviews") or ())
    )
    return Product(
        asin=asin.upper(),
        title=title,
        category=str(record.get("category", "") or ""),
        query=str(record.get("query", "") or "").lower().strip(),
        product_category=str(record.get("product_category", "") or ""),
        description=description,
        features=tuple(features),
        pricing=pricing,
        price_tag=price_tag,
        price=sampled_price(asin.upper(), pricing),
        options=options,
        attributes=tuple(str(a) for a in attrs),
        rating=str(rating if rating not in (None, "") else "N.A."),
        reviews=reviews,
    )


def load_attributes(path: str | Path) -> dict[str, dict[str, Any]]:
    """``items_ins_v2*.json``: ASIN -> ``{"attributes": [...], "instruction": str,
    "instruction_attributes": [...]}`` (the last two only for products with a synthetic goal)."""
    data = read_json(path, "attributes (items_ins_v2)")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object ASIN -> attributes, got {type(data).__name__}")
    return {str(k).upper(): (v if isinstance(v, dict) else {}) for k, v in data.items()}


def load_products(
    path: str | Path,
    attributes: dict[str, Any] | str | Path | None = None,
    num_products: int | None = None,
) -> list[Product]:
    """WebShop's product file (``items_shuffle*.json``: a JSON list of product records).

    Args:
        path: the product file.
        attributes: the ``items_ins_v2`` mapping or its path; products it lacks get ``DUMMY_ATTR``.
        num_products: keep the first ``num_products`` records (the file is already shuffled).

    Duplicate ASINs keep their first record; records the reference skips are dropped.
    """
    records = read_json(path, "products (items_shuffle)")
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of products, got {type(records).__name__}")
    if isinstance(attributes, (str, Path)):
        attributes = load_attributes(attributes)
    if num_products is not None:
        records = records[: int(num_products)]
    products, seen = [], set()
    for record in records:
        if not isinstance(record, dict):
            continue
        product = product_from_record(record, attributes)
        if product is None or product.asin in seen:
            continue
        seen.add(product.asin)
        products.append(product)
    if not products:
        raise ValueError(f"{path}: no usable product records")
    return products


_FIND_ME = re.compile(r"^\s*find me\s+", re.IGNORECASE)


def instruction_product_phrase(instruction: str, instruction_attributes: Iterable[str]) -> str:
    """The product phrase of an ``items_ins_v2`` instruction (``Find me <attrs> <phrase> with
    <attrs>``): the instruction without ``Find me``, its attributes and the joining words."""
    text = _FIND_ME.sub("", str(instruction)).lower()
    for attr in sorted(instruction_attributes, key=len, reverse=True):
        text = re.sub(rf"(?<![\w]){re.escape(str(attr).lower())}(?![\w])", " ", text)
    words = [w for w in re.split(r"[\s,]+", text) if w]
    while words and words[-1] in ("with", "for", "and", "in"):
        words.pop()
    while words and words[0] in ("with", "for", "and", "in"):
        words.pop(0)
    return " ".join(w for i, w in enumerate(words) if not (w in ("with", "for") and i == len(words) - 1))


def products_from_attributes(attributes: dict[str, dict[str, Any]]) -> list[Product]:
    """A stand-in catalogue from ``items_ins_v2`` alone (its products' pages are in
    ``items_shuffle``, which is not always at hand): one product per ASIN with an instruction,
    titled with the instruction's product phrase, described by its attribute list, without
    options, priced at the reference's default $100. For measuring search and the synthetic goals
    on WebShop's real attribute vocabulary."""
    products = []
    for asin, entry in attributes.items():
        instruction = entry.get("instruction")
        attrs = tuple(str(a) for a in entry.get("attributes") or ())
        if not instruction or not attrs:
            continue
        phrase = instruction_product_phrase(instruction, entry.get("instruction_attributes") or ())
        products.append(
            Product(
                asin=str(asin).upper(),
                title=phrase.title(),
                category="",
                query=phrase,
                product_category="",
                description=", ".join(attrs),
                features=(),
                pricing=(DEFAULT_PRICE,),
                price_tag=f"${DEFAULT_PRICE}",
                price=DEFAULT_PRICE,
                attributes=attrs,
            )
        )
    return products


# --- the generated catalogue ------------------------------------------------------------------
def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _title_case(phrase: str) -> str:
    return " ".join(w if any(c.isdigit() for c in w) else w[:1].upper() + w[1:] for w in phrase.split())


def _price(rng: random.Random, category: str) -> tuple[float, ...]:
    low, high = PRICE_BANDS[category]
    base = round(rng.uniform(low, high)) + rng.choice((0.99, 0.49, 0.95, 0.0))
    if rng.random() < 0.2:  # a price range, as some WebShop products list
        top = round(base * rng.uniform(1.1, 1.5)) + 0.99
        return (round(base, 2), round(top, 2))
    return (round(base, 2),)


def _options(rng: random.Random, ptype: ProductType) -> tuple[tuple[str, tuple[str, ...]], ...]:
    pairs = []
    for name, kind in ptype.options:
        pool = OPTION_VALUES[kind]
        k = rng.randint(min(3, len(pool)), min(6, len(pool)))
        chosen = set(rng.sample(pool, k))
        pairs.append((name, tuple(v for v in pool if v in chosen)))  # page order = pool order
    return tuple(pairs)


def generate_product(rng: random.Random, ptype: ProductType, asin: str) -> Product:
    """One generated product of type ``ptype``."""
    brand = rng.choice(BRAND_HEADS) + rng.choice(BRAND_TAILS)
    attrs = tuple(rng.sample(ptype.attributes, rng.choice((3, 4, 4, 5))))
    shown = list(attrs[:2])
    extra = rng.choice(TITLE_EXTRAS) + " " if rng.random() < 0.4 else ""
    title = f"{brand} {extra}{ptype.title}, " + ", ".join(_title_case(a) for a in shown)
    options = _options(rng, ptype)
    pricing = _price(rng, ptype.category)
    price_tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
    option_text = "; ".join(f"{len(values)} {name} options" for name, values in options)
    description = (
        f"The {brand} {ptype.noun} is made for everyday use. "
        f"Highlights: {', '.join(attrs)}. {option_text.capitalize()}."
    )
    features = tuple(f"{a.upper()}: this {ptype.noun} is {a}." for a in attrs) + (
        f"Sold by {brand}; satisfaction guaranteed.",
    )
    return Product(
        asin=asin,
        title=title,
        category=ptype.category,
        query=ptype.query,
        product_category=ptype.path,
        description=description,
        features=features,
        pricing=pricing,
        price_tag=price_tag,
        price=sampled_price(asin, pricing),
        options=options,
        attributes=attrs,
    )


def generate_catalogue(seed: int = 0, n_products: int = 1000, types: Iterable[ProductType] | None = None) -> list[Product]:
    """``n_products`` generated products, deterministic in ``seed``.

    Types are used in turn (balanced), then the list is shuffled, so search ties do not favour a
    type. ASINs are unique.
    """
    if n_products < 1:
        raise ValueError("n_products must be >= 1")
    ptypes = tuple(types) if types is not None else PRODUCT_TYPES
    rng = random.Random(f"webshop-catalogue/{int(seed)}")
    taken: set[str] = set()
    products = [generate_product(rng, ptypes[i % len(ptypes)], _asin(rng, taken)) for i in range(n_products)]
    rng.shuffle(products)
    return products

