"""The WebShop reward: hand-computed cases of the paper's score, and its string matching."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arl.envs.webshop.catalogue import Product
from arl.envs.webshop.goals import Goal
from arl.envs.webshop.reward import (
    full_process,
    is_success,
    lcs_length,
    normalize_color,
    title_type_words,
    token_set_ratio,
    type_reward,
    webshop_score,
)

PATH = "Clothing, Shoes & Jewelry › Women › Shoes › Athletic › Running"
SHOE = Product(
    asin="B0TESTSHOE",
    title="Acme Running Shoes, Non Slip, Arch Support",
    category="fashion",
    query="women's running shoes",
    product_category=PATH,
    description="Great shoes with memory foam, 8 colors.",
    features=("Lightweight design for daily runs",),
    pricing=(30.0,),
    price_tag="$30.0",
    price=30.0,
    options=(("color", ("black", "navy blue", "red")), ("size", ("7", "8", "9"))),
    attributes=("non slip", "arch support", "rubber sole"),
)


def _goal(attributes, options, price_upper=40.0, **kw) -> Goal:
    fields = {
        "asin": SHOE.asin, "instruction_text": "i need running shoes", "attributes": tuple(attributes),
        "goal_options": tuple(options), "price_upper": price_upper, "name": SHOE.title, "query": SHOE.query,
        "category": "fashion", "product_category": PATH,
    }
    fields.update(kw)
    return Goal(**fields)


# --- string matching --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("navy blue", "blue navy", 100),  # same token set
        ("tea tree", "Tea-Tree oil", 100),  # one token set inside the other (after processing)
        # sect "machine"; "machine wash" vs "machine washable": 2*12/(12+16) = 85.7 -> 86
        ("machine wash", "machine washable", 86),
        # no shared token: "red" vs "blue": LCS 1 ("e"), 2*1/7 = 28.6 -> 29
        ("red", "blue", 29),
        # sect "of pack"; "of pack 2" vs "of pack 4": 2*8/18 = 88.9 -> 89 (fuzzy match, > 85)
        ("pack of 2", "pack of 4", 89),
        ("", "anything", 0),
        ("!!!", "x", 0),
    ],
)
def test_token_set_ratio_hand_values(a, b, expected):
    assert token_set_ratio(a, b) == expected


def test_full_process():
    assert full_process("  Tea-Tree  OIL!! ") == "tea tree oil"


def _lcs_dp(a: str, b: str) -> int:
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcde ", max_size=30), st.text(alphabet="abcde ", max_size=30))
def test_bit_parallel_lcs_equals_dynamic_programming(a, b):
    assert lcs_length(a, b) == _lcs_dp(a, b)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_token_set_ratio_is_symmetric_and_bounded(a, b):
    value = token_set_ratio(a, b)
    assert value == token_set_ratio(b, a)
    assert 0 <= value <= 100


def test_normalize_color_at_word_boundaries():
    assert normalize_color("navy blue") == "navy blue"
    assert normalize_color("dark navy blue stripes") == "navy blue"
    assert normalize_color("heather grey") == "grey"
    assert normalize_color("standard") == "standard"  # no "tan" inside "standard"
    assert normalize_color("x-large") == "x-large"


def test_title_type_words():
    assert title_type_words("Acme Running Shoes, Non Slip, Arch Support") == (
        "acme", "running", "shoes", "non", "slip", "arch", "support",
    )
    # stop words, numbers, units and marketing adjectives are not type words
    assert title_type_words("The Premium 2 Pack of Soft Towels, 16 oz") == ("towels",)


# --- the score ----------------------------------------------------------------------------------
def test_partial_score_five_sixths():
    goal = _goal(["non slip", "memory foam", "water resistant"], ["navy blue", "8"])
    out = webshop_score(SHOE, goal, {"color": "navy blue", "size": "8"})
    # attributes: "non slip" (attribute list), "memory foam" (in the description); not
    # "water resistant" -> 2 of 3. Options: navy blue (fuzzy 100), size 8 (exact) -> 2 of 2.
    # Price 30 <= 40 -> 1. r_type 1 (same query). (2 + 2 + 1) / (3 + 2 + 1) = 5/6.
    assert out.num_attr_matches == 2 and out.num_option_matches == 2 and out.r_price
    assert out.r_type == 1.0 and out.query_match and out.category_match and out.title_score == 1.0
    assert out.score == pytest.approx(5 / 6)
    assert out.r_att == pytest.approx(2 / 3) and out.r_option == 1.0
    assert not is_success(out.score)


def test_wrong_options_and_price_one_third():
    goal = _goal(["non slip", "memory foam", "water resistant"], ["navy blue", "8"])
    out = webshop_score(SHOE, goal, {"color": "black", "size": "9"}, price=50.0)
    # black matches neither goal option nor any text; size 9 is not "8" and "9" is in no text;
    # price 50 > 40. (2 + 0 + 0) / 6 = 1/3.
    assert out.num_option_matches == 0 and not out.r_price
    assert out.score == pytest.approx(1 / 3)


def test_perfect_purchase_scores_exactly_one():
    goal = _goal(["non slip", "arch support"], ["red", "9"])
    out = webshop_score(SHOE, goal, {"color": "red", "size": "9"})
    assert out.score == 1.0 and is_success(out.score)


def test_unselected_options_do_not_count():
    goal = _goal(["non slip", "arch support"], ["red", "9"])
    out = webshop_score(SHOE, goal, {})
    assert out.score == pytest.approx(3 / 5)  # (2 + 0 + 1) / (2 + 2 + 1)


def test_size_matches_exactly_color_fuzzily():
    goal = _goal(["non slip"], ["navy", "7.5"])
    # size "7" is not exactly "7.5" (fuzzily it would be: "7" is a token subset of "7 5") and "7"
    # is in no text; color "navy blue" vs goal "navy": token subset -> 100.
    assert token_set_ratio("7", "7.5") == 100
    out = webshop_score(SHOE, goal, {"color": "navy blue", "size": "7"})
    assert out.num_option_matches == 1
    assert out.score == pytest.approx((1 + 1 + 1) / (1 + 2 + 1))


def test_option_matches_are_capped_at_the_goal_options():
    # The goal asks one option; size "8" also counts through the description ("8 colors"), so the
    # reference would count 2 matches and score (1 + 2 + 1) / (1 + 1 + 1) = 4/3. Capped: 1.
    goal = _goal(["non slip"], ["red"])
    out = webshop_score(SHOE, goal, {"color": "red", "size": "8"})
    assert out.num_option_matches == 1 and out.score == 1.0


def test_type_reward_levels():
    other_path = "Sports & Outdoors › Outdoor Recreation › Hiking › Boots"
    # type words of the goal: trail, hiking, boots, leather, acme; shared with the shoe: acme -> 1/5
    goal = _goal(["non slip"], [], name="Trail Hiking Boots Leather Acme", query="hiking boots",
                 product_category=other_path)
    r_type, query_match, category_match, title_score = type_reward(SHOE, goal)
    assert (query_match, category_match, title_score) == (False, False, pytest.approx(0.2))
    assert r_type == 0.5  # no query/category match and title score not above 0.2
    out = webshop_score(SHOE, goal, {})
    assert out.score == pytest.approx(0.5 * (1 + 0 + 1) / (1 + 0 + 1))
    # one shared type word of eleven: under 0.1 -> r_type 0.1
    goal = _goal([], [], name="Acme " + " ".join(f"word{c}" for c in "abcdefghij"), query="x",
                 product_category=other_path)
    assert type_reward(SHOE, goal)[0] == 0.1
    # nothing shared: r_type 0, so the score is 0 whatever else matches
    goal = _goal(["non slip"], ["red"], name="Wooden Bookshelf", query="bookshelf", product_category=other_path)
    assert type_reward(SHOE, goal)[0] == 0.0
    assert webshop_score(SHOE, goal, {"color": "red"}).score == 0.0
    # a category match (two shared path levels) keeps r_type 1 with a low title score
    goal = _goal([], [], name="Trail Hiking Boots Leather Acme", query="hiking boots",
                 product_category="Clothing, Shoes & Jewelry › Men › Shoes › Outdoor")
    assert type_reward(SHOE, goal)[0] == 1.0


def test_goal_without_type_words_gets_title_score_point_two():
    goal = _goal(["non slip"], [], name="The 2 Pack", query="x", product_category="A › B")
    assert type_reward(SHOE, goal) == (0.5, False, False, 0.2)


def test_breakdown_dict_is_plain():
    goal = _goal(["non slip"], ["red"])
    d = webshop_score(SHOE, goal, {"color": "red"}).as_dict()
    assert d["score"] == 1.0 and set(d) >= {"r_type", "r_att", "r_option", "r_price", "title_score"}
