"""WebShop catalogue and goals: the generated default, the loaders of WebShop's files, the split."""

from __future__ import annotations

import json
import re

import pytest

from arl.envs.webshop.catalogue import (
    DUMMY_ATTR,
    generate_catalogue,
    instruction_product_phrase,
    load_attributes,
    load_products,
    parse_pricing,
    products_from_attributes,
)
from arl.envs.webshop.goals import (
    NO_PRICE_BOUND,
    generate_goals,
    human_goals,
    load_goal_query_map,
    load_human_instructions,
    load_instruction_texts,
    price_bound,
    shuffle_goals,
    split_indices,
    synthetic_goals,
)
from arl.envs.webshop.reward import webshop_score
from arl.envs.webshop.vocabulary import CATEGORIES, OPTION_VALUES, PRODUCT_TYPES
from arl_testing import SHARED_DATA

WEBSHOP_DATA = SHARED_DATA / "webshop"
PRICE_TEXT = re.compile(r", and price lower than (\d+\.\d\d) dollars$")

# --- WebShop's file formats, written by the tests ----------------------------------------------
ITEMS_SHUFFLE = [
    {
        "asin": "B000TEST01", "category": "beauty", "query": "Shampoo ",
        "name": "Acme Sulfate Free Shampoo for Dry Hair",
        "product_category": "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        "full_description": "A gentle shampoo with argan oil.", "pricing": "$12.99",
        "images": ["https://example.invalid/1.jpg"],
        "small_description": ["Sulfate free formula", "For dry hair"],
        "customization_options": {
            "Size": [{"value": "8 Fl Oz", "image": None}, {"value": "16 Fl Oz/Pack of 2", "image": None}],
            "Scent": [{"value": "Lavender", "image": "https://example.invalid/2.jpg"}],
        },
        "average_rating": 4.5, "brand": "Acme", "product_information": {"x": 1},
    },
    {
        "asin": "B000TEST02", "category": "beauty", "query": "shampoo",
        "name": "Bolt Tea Tree Shampoo", "product_category": "Beauty & Personal Care › Hair Care › Shampoos",
        "full_description": "", "pricing": "$10.00$15.50", "images": [],
        "small_description": "One bullet", "customization_options": None,
    },
    {"asin": "nan", "name": "skipped", "pricing": "$1.00"},
    {"asin": "B000TEST01", "name": "duplicate, skipped", "pricing": "$1.00"},
    {"asin": "B000TEST03", "category": "beauty", "query": "soap", "name": "Plain Soap", "pricing": "",
     "small_description": [], "customization_options": {}},
]
ITEMS_INS = {
    "B000TEST01": {"attributes": ["sulfate free", "dry hair", "argan oil"],
                   "instruction": "Find me sulfate free shampoo for dry hair",
                   "instruction_attributes": ["sulfate free", "dry hair"]},
    "B000TEST02": {"attributes": ["tea tree"]},
}
HUMAN_INS = {
    "B000TEST01": [
        {"asin": "B000TEST01", "instruction": "i need a sulfate free shampoo in lavender.",
         "instruction_attributes": ["sulfate free"], "instruction_options": ["lavender", "8 fl oz"]},
        {"asin": "B000TEST01", "instruction": "shampoo please", "instruction_attributes": [],
         "instruction_options": []},
    ],
    "B0NOTHERE0": [{"instruction": "not in the catalogue", "instruction_attributes": ["x"]}],
}


@pytest.fixture()
def webshop_files(tmp_path):
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(ITEMS_SHUFFLE), encoding="utf-8")
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(ITEMS_INS), encoding="utf-8")
    (tmp_path / "items_human_ins.json").write_text(json.dumps(HUMAN_INS), encoding="utf-8")
    return tmp_path


# --- loaders ------------------------------------------------------------------------------------
def test_parse_pricing():
    assert parse_pricing("$12.99") == ((12.99,), "$12.99")
    assert parse_pricing("$10.00$15.50") == ((10.0, 15.5), "$10.0 to $15.5")
    assert parse_pricing("$1,299.00") == ((1299.0,), "$1299.0")
    assert parse_pricing("") == ((100.0,), "$100.0")
    assert parse_pricing(None) == ((100.0,), "$100.0")


def test_load_products_official_format(webshop_files):
    products = load_products(webshop_files / "items_shuffle_1000.json", webshop_files / "items_ins_v2_1000.json")
    assert [p.asin for p in products] == ["B000TEST01", "B000TEST02", "B000TEST03"]
    a, b, c = products
    assert a.title == "Acme Sulfate Free Shampoo for Dry Hair" and a.query == "shampoo"
    assert a.options == (("size", ("8 fl oz", "16 fl oz | pack of 2")), ("scent", ("lavender",)))
    assert a.pricing == (12.99,) and a.price_tag == "$12.99" and a.price == 12.99
    assert a.features == ("Sulfate free formula", "For dry hair") and a.rating == "4.5"
    assert a.attributes == ("sulfate free", "dry hair", "argan oil")
    assert a.description == "A gentle shampoo with argan oil."
    assert b.pricing == (10.0, 15.5) and b.price_tag == "$10.0 to $15.5"
    assert 10.0 <= b.price <= 15.5  # drawn in the range, seeded by the ASIN
    assert b.price == load_products(webshop_files / "items_shuffle_1000.json")[1].price
    assert b.features == ("One bullet",) and b.options == () and b.attributes == ("tea tree",)
    assert c.pricing == (100.0,) and c.price_tag == "$100.0" and c.attributes == (DUMMY_ATTR,)
    assert c.rating == "N.A."
    assert [p.asin for p in load_products(webshop_files / "items_shuffle_1000.json", num_products=1)] == ["B000TEST01"]


def test_missing_files_name_the_path(tmp_path):
    missing = tmp_path / "items_shuffle_1000.json"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        load_products(missing)
    with pytest.raises(FileNotFoundError, match="items_ins_v2"):
        load_attributes(tmp_path / "nope.json")
    with pytest.raises(FileNotFoundError, match="human_goals"):
        load_instruction_texts(tmp_path / "human_goals.json")


def test_wrong_json_shape_is_a_clear_error(tmp_path):
    path = tmp_path / "items.json"
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="expected a JSON list"):
        load_products(path)


def test_human_goals_from_files(webshop_files):
    products = load_products(webshop_files / "items_shuffle_1000.json", webshop_files / "items_ins_v2_1000.json")
    goals = human_goals(products, load_human_instructions(webshop_files / "items_human_ins.json"))
    assert len(goals) == 1  # the instruction without attributes and the unknown ASIN are skipped
    (goal,) = goals
    m = PRICE_TEXT.search(goal.instruction_text)
    assert goal.instruction_text.startswith("i need a sulfate free shampoo in lavender, and price lower than")
    # price 12.99: bounds above it are 20, 30, 40, 50; two are drawn and the larger is kept
    assert m and float(m.group(1)) == goal.price_upper and goal.price_upper in (30.0, 40.0, 50.0)
    assert goal.attributes == ("sulfate free",) and goal.goal_options == ("lavender", "8 fl oz")
    assert goal.name == products[0].title and goal.query == "shampoo" and goal.weight == 1.0
    d = goal.to_dict()
    assert set(d) == {"asin", "category", "query", "name", "product_category", "instruction_text",
                      "attributes", "price_upper", "goal_options", "weight"}
    assert d["goal_options"] == ["lavender", "8 fl oz"]
    # the target bought with the asked options scores 1
    assert webshop_score(products[0], goal, {"size": "8 fl oz", "scent": "lavender"}).score == 1.0


def test_synthetic_goals_from_files(webshop_files):
    attributes = load_attributes(webshop_files / "items_ins_v2_1000.json")
    products = load_products(webshop_files / "items_shuffle_1000.json", attributes)
    goals = synthetic_goals(products, attributes)
    # one goal per option combination of the product with an instruction: 2 sizes x 1 scent
    assert len(goals) == 2
    texts = sorted(g.instruction_text for g in goals)
    assert texts[0].startswith("Find me sulfate free shampoo for dry hair with scent: lavender, and size: 16 fl oz | pack of 2")
    assert goals[0].to_dict()["goal_options"] in ({"scent": "lavender", "size": "8 fl oz"},
                                                  {"scent": "lavender", "size": "16 fl oz | pack of 2"})
    assert all(g.weight == pytest.approx(0.5) for g in goals)  # each attribute in 2 goals: mean of 1/2


def test_price_bound_rules():
    import random

    upper, text = price_bound(12.99, random.Random(0))
    assert upper in (30.0, 40.0, 50.0) and text == f", and price lower than {upper:.2f} dollars"
    assert price_bound(985.0, random.Random(0)) == (NO_PRICE_BOUND, "")  # only 990 is above


def test_split_indices():
    assert split_indices(2000, "test") == list(range(500))
    assert split_indices(2000, "train") == list(range(500, 2000))
    assert split_indices(10, "all") == list(range(10))
    assert split_indices(10, "train", test_goals=4) == list(range(4, 10))
    with pytest.raises(ValueError, match="empty"):
        split_indices(400, "train")
    with pytest.raises(ValueError, match="valid"):
        split_indices(10, "dev")


# --- the generated catalogue --------------------------------------------------------------------
def test_generated_catalogue_is_deterministic_and_well_formed():
    a, b = generate_catalogue(3, 120), generate_catalogue(3, 120)
    assert a == b
    assert generate_catalogue(4, 120) != a
    assert len({p.asin for p in a}) == 120
    assert {p.category for p in a} == set(CATEGORIES)
    for p in a:
        assert re.fullmatch(r"B0[0-9A-Z]{8}", p.asin)
        assert 3 <= len(p.attributes) <= 5 and p.options
        assert all(attr in p.description for attr in p.attributes)
        for name, values in p.options:
            assert name == name.lower() and values and all(v == v.lower() for v in values)
        assert p.price_tag.startswith("$") and len(p.pricing) in (1, 2)
        assert p.pricing[0] <= p.price <= p.pricing[-1]
        assert p.product_category.count("›") >= 2


def test_vocabulary_has_no_option_value_that_is_a_button():
    from arl.envs.webshop.pages import BUTTONS

    for values in OPTION_VALUES.values():
        assert not set(values) & BUTTONS
    for ptype in PRODUCT_TYPES:
        for _, kind in ptype.options:
            assert kind in OPTION_VALUES


def test_generated_goals_have_the_reference_shape_and_are_reachable():
    products = generate_catalogue(0, 60)
    goals = generate_goals(products, 0, goals_per_product=2)
    assert len(goals) == 120 and goals == generate_goals(products, 0, goals_per_product=2)
    by_asin = {p.asin: p for p in products}
    for goal in goals:
        product = by_asin[goal.asin]
        assert 1 <= len(goal.attributes) <= 3 and set(goal.attributes) <= set(product.attributes)
        assert goal.option_names == tuple(n for n, _ in product.options)
        assert all(v in dict(product.options)[n] for n, v in zip(goal.option_names, goal.goal_options))
        m = PRICE_TEXT.search(goal.instruction_text)
        assert m and float(m.group(1)) == goal.price_upper and goal.price_upper > product.price
        assert goal.instruction_text == goal.instruction_text.lower()
        for attr in goal.attributes:
            assert attr in goal.instruction_text
        for value in goal.goal_options:
            assert value in goal.instruction_text
        # the target with the asked options is a perfect purchase
        chosen = dict(zip(goal.option_names, goal.goal_options))
        assert webshop_score(product, goal, chosen).score == 1.0


def test_shuffle_is_fixed():
    goals = generate_goals(generate_catalogue(0, 30), 0)
    assert shuffle_goals(goals) == shuffle_goals(goals)
    assert shuffle_goals(goals) != goals and sorted(shuffle_goals(goals), key=goals.index) == goals


def test_instruction_product_phrase():
    assert instruction_product_phrase(
        "Find me easy carry, high quality refillable containers with rose gold",
        ["easy carry", "high quality", "rose gold"],
    ) == "refillable containers"
    assert instruction_product_phrase(
        "Find me eco friendly cotton balls & swabs for sensitive skin", ["eco friendly", "sensitive skin"]
    ) == "cotton balls & swabs"


# --- the shared data (skipped when absent) ------------------------------------------------------
needs_shared = pytest.mark.skipif(not WEBSHOP_DATA.is_dir(), reason=f"WebShop data not found at {WEBSHOP_DATA}")


@needs_shared
def test_shared_items_ins_v2_synthetic_goals():
    attributes = load_attributes(WEBSHOP_DATA / "items_ins_v2_1000.json")
    assert len(attributes) == 1000
    products = products_from_attributes(attributes)
    assert len(products) == 415  # the ASINs with an instruction and attributes
    goals = synthetic_goals(products, attributes)
    assert len(goals) == 415
    by_asin = {p.asin: p for p in products}
    for goal in goals:
        assert goal.attributes and PRICE_TEXT.search(goal.instruction_text)
        assert webshop_score(by_asin[goal.asin], goal, {}).score == 1.0


@needs_shared
def test_shared_goal_texts_and_query_map():
    texts = load_instruction_texts(WEBSHOP_DATA / "human_goals.json")
    assert len(texts) == 12087 and all(isinstance(t, str) and t for t in texts[:100])
    queries = load_goal_query_map(WEBSHOP_DATA / "goal_query_map.json")
    assert len(queries) == 1506 and all(queries[k] for k in list(queries)[:100])
