"""WebShopEnv: the TextEnv contract, exact pages and navigation, rewards, hostile actions, the
scripted shopper, prompts."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("bm25s")

from test_webshop_catalogue import HUMAN_INS, ITEMS_INS, ITEMS_SHUFFLE

from arl.agent.parsing import parse_response
from arl.agent.prompts import HistoryItem, render_history
from arl.envs.base import INFO_KEYS, StepResult, TextEnv
from arl.envs.registry import make_env
from arl.envs.webshop import WebShopEnv, expert_response, parse_action
from arl.envs.webshop.env import VAL_SEED_BASE, goal_index
from arl.envs.webshop.prompt import ANSWER_RULES, INTRO

EXTRA_KEYS = ("steps", "max_steps", "page", "action_valid", "invalid_reason")


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    return WebShopEnv()


@pytest.fixture()
def small_env(tmp_path) -> WebShopEnv:
    """An env on three products written in WebShop's file format, one human goal."""
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(ITEMS_SHUFFLE), encoding="utf-8")
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(ITEMS_INS), encoding="utf-8")
    (tmp_path / "items_human_ins.json").write_text(json.dumps(HUMAN_INS), encoding="utf-8")
    return WebShopEnv(data_dir=str(tmp_path), split="all", results_per_page=1)


def _check_info(info: dict) -> None:
    for key in INFO_KEYS + EXTRA_KEYS:
        assert key in info, key
    assert isinstance(info["won"], bool) and 0.0 <= info["score"] <= 1.0
    assert isinstance(info["admissible_actions"], list)
    assert all(isinstance(a, str) for a in info["admissible_actions"])
    assert isinstance(info["anchor"], str) and isinstance(info["task"], str) and info["task"]


def _action(answer: str) -> str:
    return answer.split("<action>")[1].split("</action>")[0]


def _play_expert(env: WebShopEnv, seed: int) -> StepResult:
    env.reset(seed)
    while True:
        result = env.step(_action(expert_response(env)))
        if result.done:
            return result


# --- contract ---------------------------------------------------------------------------------
def test_contract_and_registry(env):
    made = make_env("webshop")
    assert isinstance(made, WebShopEnv) and isinstance(made, TextEnv)
    assert made.shop is env.shop  # the catalogue and index are built once per process
    spec = made.spec
    assert spec.name == "webshop" and spec.max_turns == 15 and spec.invalid_action == "noop"
    assert spec.check_admissible is False  # search queries are free text: the env validates
    obs, info = made.reset(0)
    _check_info(info)
    assert obs == info["anchor"] == "Search"
    assert info["admissible_actions"] == ["search[<your query>]"]
    assert info["steps"] == 0 and not info["won"] and info["score"] == 0.0 and info["action_valid"]
    assert info["task_type"] in ("beauty", "electronics", "fashion", "food", "furniture")
    from arl.agent.experts import get_expert

    assert get_expert("webshop") is expert_response


def test_reset_is_deterministic_and_uses_the_split(env):
    other = WebShopEnv()
    for seed in (0, 1, 17, VAL_SEED_BASE, VAL_SEED_BASE + 9):
        assert env.reset(seed) == other.reset(seed)
    # train seeds play goals 500.., validation seeds (>= 2**30) goals 0..499
    n = len(env.shop.goals)
    assert n == 2000
    assert goal_index(0, n, "auto") == 500 and goal_index(1499, n, "auto") == 1999
    assert goal_index(1500, n, "auto") == 500
    assert goal_index(VAL_SEED_BASE + 3, n, "auto") == 3 and goal_index(VAL_SEED_BASE + 503, n, "auto") == 3
    assert goal_index(7, n, "test") == 7 and goal_index(2007, n, "all") == 7
    env.reset(VAL_SEED_BASE + 3)
    assert env.goal is env.shop.goals[3]
    tasks = {env.reset(seed)[1]["task"] for seed in range(50)}
    assert len(tasks) >= 45
    # a reset after some steps restores the start
    obs, info = env.reset(5)
    env.step("search[red]")
    assert env.reset(5) == (obs, info)


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError):
        WebShopEnv().step("search[x]")


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="split"):
        WebShopEnv(split="dev")
    with pytest.raises(ValueError, match="prompt_style"):
        WebShopEnv(prompt_style="tiny")
    with pytest.raises(FileNotFoundError, match="items_shuffle"):
        WebShopEnv(data_dir=str(tmp_path))
    missing = tmp_path / "mine.json"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        WebShopEnv(products_path=str(missing))


# --- pages and navigation ---------------------------------------------------------------------
def test_pages_navigation_and_purchase_exact(small_env):
    env = small_env
    _, info = env.reset(0)
    assert info["task"].startswith("i need a sulfate free shampoo in lavender, and price lower than")
    r = env.step("search[Shampoo]")
    assert r.info["page"] == "results" and r.info["action_valid"] and r.reward == 0.0 and not r.done
    # BM25 (k1 0.9, b 0.4): "shampoo" twice in A's 25-token document, once in B's 6 tokens (mean
    # length 11): A 2 / (2 + 0.9 (0.6 + 0.4 * 25/11)) = 0.60 > B 1 / (1 + 0.9 (0.6 + 0.4 * 6/11)) = 0.58
    assert env.results == ["B000TEST01", "B000TEST02"]  # the soap does not match
    first = env.results[0]
    titles = {"B000TEST01": ("Acme Sulfate Free Shampoo for Dry Hair", "$12.99"),
              "B000TEST02": ("Bolt Tea Tree Shampoo", "$10.0 to $15.5")}
    assert r.observation == " [SEP] ".join(
        ["Back to Search", "Page 1 (Total results: 2)", "Next >", first, *titles[first]]
    )
    assert r.info["admissible_actions"] == ["click[back to search]", "click[next >]", f"click[{first.lower()}]"]
    r = env.step("click[next >]")
    second = env.results[1]
    assert r.observation == " [SEP] ".join(
        ["Back to Search", "Page 2 (Total results: 2)", "< Prev", second, *titles[second]]
    )
    assert r.info["admissible_actions"] == ["click[back to search]", "click[< prev]", f"click[{second.lower()}]"]
    env.step("click[< prev]")
    r = env.step("click[B000TEST01]")  # case-insensitive
    item = ["Back to Search", "< Prev", "size", "8 fl oz", "16 fl oz | pack of 2", "scent", "lavender"]
    tail = ["Acme Sulfate Free Shampoo for Dry Hair", "Price: $12.99", "Rating: 4.5", "Description",
            "Features", "Reviews", "Buy Now"]
    assert r.observation == " [SEP] ".join(item + tail)
    assert r.info["admissible_actions"] == [
        "click[back to search]", "click[< prev]", "click[8 fl oz]", "click[16 fl oz | pack of 2]",
        "click[lavender]", "click[description]", "click[features]", "click[reviews]", "click[buy now]",
    ]
    r = env.step("click[ Lavender ]")
    assert r.observation == " [SEP] ".join(item + ["Selected: scent: lavender"] + tail)
    r = env.step("click[features]")
    assert r.observation == "Back to Search [SEP] < Prev [SEP] Sulfate free formula [SEP] For dry hair"
    assert r.info["admissible_actions"] == ["click[back to search]", "click[< prev]"]
    r = env.step("click[< prev]")  # back to the item, the selection kept
    assert "Selected: scent: lavender" in r.observation
    r = env.step("click[16 fl oz | pack of 2]")
    r = env.step("click[8 fl oz]")  # a new choice replaces the old one
    assert "Selected: scent: lavender, size: 8 fl oz" in r.observation
    assert env.steps == 9  # search, next, prev, item, lavender, features, prev, two sizes
    r = env.step("click[buy now]")
    assert r.done and r.reward == 10.0 and r.info["won"] and r.info["score"] == 1.0
    assert r.observation == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    assert r.info["admissible_actions"] == [] and r.info["score_breakdown"]["r_type"] == 1.0
    # after the end: no change, no reward
    again = env.step("click[buy now]")
    assert again.done and again.reward == 0.0 and again.info["won"]


def test_wrong_purchase_scores_but_pays_nothing(small_env):
    env = small_env
    env.reset(0)
    env.step("search[tea tree shampoo]")
    env.step("click[b000test02]")
    r = env.step("click[buy now]")
    # Bolt Tea Tree Shampoo: no "sulfate free" attribute or text, no option chosen, price <= bound,
    # same query -> (0 + 0 + 1) / (1 + 2 + 1) = 0.25
    assert r.done and r.reward == 0.0 and not r.info["won"] and r.info["score"] == pytest.approx(0.25)


def test_back_to_search_and_prev_from_item(small_env):
    env = small_env
    env.reset(0)
    env.step("search[shampoo]")
    env.step("click[next >]")
    page2 = env.step("click[" + env.results[1].lower() + "]")
    assert page2.info["page"] == "item"
    r = env.step("click[< prev]")
    assert r.info["page"] == "results" and "Page 2 (Total results: 2)" in r.observation
    r = env.step("click[back to search]")
    assert r.observation == "Search" and r.info["admissible_actions"] == ["search[<your query>]"]


def test_no_results_page(env):
    env.reset(0)
    r = env.step("search[qwxz vvvv]")
    assert r.info["action_valid"] and r.observation == "Back to Search [SEP] Page 1 (Total results: 0)"
    assert r.info["admissible_actions"] == ["click[back to search]"]


# --- invalid and hostile actions --------------------------------------------------------------
HOSTILE = [
    "", "   ", "noop", "x" * 100_000, "click[" + "a" * 100_000 + "]", "search[" + "a" * 100_000 + "]",
    "\x00\x01click[buy now]\x7f", "<think>x</think><action>click[buy now]</action>", "click[buy now",
    "click[]", "search[]", "search[   ]", "search[!!!]", "search[\x00\x1b]", "click[unknown]",
    "click[buy now]", "click[search]", "click[next >]", "CLICK[[[]]]", "search[a]b]c", "\u202e\ufeff",
    None, 123, b"click[buy now]",
]


@pytest.mark.parametrize("action", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_actions_are_invalid_no_ops(env, action):
    obs, _ = env.reset(3)
    r = env.step(action)
    assert isinstance(r, StepResult) and not r.done and r.reward == 0.0
    _check_info(r.info)
    assert not r.info["action_valid"] and r.info["invalid_reason"]
    assert r.observation.startswith("Invalid action: ") and r.observation.endswith("\n" + obs)
    assert r.info["anchor"] == obs and r.info["steps"] == 1  # the page is unchanged; the step counts
    assert len(r.observation) < 500  # the action is never echoed


def test_search_only_on_the_search_page_and_control_chars_in_queries(env):
    env.reset(3)
    r = env.step("search[red\x00shoes]")
    assert r.info["action_valid"] and env.state.query == "red shoes"
    r = env.step("search[blue shoes]")
    assert not r.info["action_valid"] and "search page" in r.info["invalid_reason"]


def test_parse_action():
    assert parse_action(" Search [ Red  Shoes ] ") == ("search", "Red Shoes")
    assert parse_action("click[16 fl oz [pack]]") == ("click", "16 fl oz [pack]")
    assert parse_action("click[a\tb\x07c]") == ("click", "a b c")
    assert parse_action("buy") == (None, "use search[...] or click[...]")
    assert parse_action(None) == (None, "action is not text")


def test_episode_ends_after_max_steps():
    env = WebShopEnv(max_steps=15)
    env.reset(4)
    for step in range(1, 16):
        r = env.step("noop")
        assert r.done == (step == 15) and r.reward == 0.0
    assert not r.info["won"] and r.info["score"] == 0.0 and r.info["steps"] == 15
    after = env.step("search[x]")
    assert after.done and after.reward == 0.0 and after.info["steps"] == 15


_action_text = st.one_of(
    st.text(max_size=60),
    st.builds(lambda name, arg: f"{name}[{arg}]", st.sampled_from(["search", "click", "Click", "SEARCH"]),
              st.text(max_size=40)),
    st.sampled_from(["click[next >]", "click[< prev]", "click[back to search]", "click[buy now]",
                     "click[description]", "search[red shoes]", "noop"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 3000), actions=st.lists(_action_text, min_size=1, max_size=20), pick=st.randoms())
def test_property_any_actions_never_raise(env, seed, actions, pick):
    _, info = env.reset(seed)
    done = False
    for raw in actions:
        # mix in clicks on what the page shows, so the walk reaches items and purchases
        action = raw if pick.random() < 0.5 else pick.choice(info["admissible_actions"] or ["noop"])
        r = env.step(action)
        _check_info(r.info)
        assert r.reward in (0.0, 10.0) and (r.reward == 10.0) == (r.done and r.info["won"])
        assert r.info["steps"] <= env.max_steps
        if done:
            assert r.done and r.reward == 0.0
        done, info = r.done, r.info
    assert done or env.steps < env.max_steps


# --- the scripted shopper ---------------------------------------------------------------------
@pytest.mark.parametrize("style", ["full", "compact"])
def test_expert_reaches_score_one(style):
    env = WebShopEnv(prompt_style=style)
    seeds = list(range(150)) + [VAL_SEED_BASE + i for i in range(150)]
    wins, lengths = 0, []
    for seed in seeds:
        result = _play_expert(env, seed)
        wins += result.info["won"]
        lengths.append(env.steps)
        assert result.reward == (10.0 if result.info["won"] else 0.0)
    assert wins / len(seeds) >= 0.95, wins / len(seeds)  # measured 1.0 (2000 goals)
    assert max(lengths) <= 15 and sum(lengths) / len(lengths) < 7


def test_expert_answers_parse_and_are_admissible(env):
    for seed in range(20):
        _, info = env.reset(seed)
        while True:
            answer = expert_response(env)
            parsed = parse_response(answer, None)
            assert parsed.valid, answer
            if info["page"] == "search":
                assert parsed.action.startswith("search[") and "search[<your query>]" in info["admissible_actions"]
            else:  # clicks on items copy the ASIN as the page shows it; matching ignores case
                assert parsed.action.lower() in info["admissible_actions"]
                assert parse_response(answer, info["admissible_actions"]).valid
            r = env.step(parsed.action)
            assert r.info["action_valid"]
            if r.done:
                break
            info = r.info


def test_expert_takes_over_from_random_states():
    env = WebShopEnv()
    rng = random.Random(0)
    wins = played = 0
    for seed in range(200):
        _, info = env.reset(seed)
        done = False
        for _ in range(3):
            action = rng.choice(info["admissible_actions"]).replace("<your query>", "red shoes")
            r = env.step(action)
            info, done = r.info, r.done
            if done:
                break
        if done:  # a random purchase ended it
            continue
        played += 1
        while not done:
            r = env.step(_action(expert_response(env)))
            done = r.done
        wins += r.info["won"]
    assert wins / played >= 0.9, wins / played  # measured 1.0


def test_expert_on_webshop_files(small_env):
    result = _play_expert(small_env, 0)
    assert result.info["won"] and small_env.steps == 5  # search, open, two options, buy


# --- prompts ----------------------------------------------------------------------------------
def test_full_prompt_is_the_reference_template(env):
    obs, info = env.reset(0)
    prompt = env.spec.render_prompt(obs, "", info)
    assert prompt == (
        f"{INTRO}\nYour task is to: {info['task']}.\nYour current observation is: Search.\n"
        "Your admissible actions of the current situation are:\n[\n'search[<your query>]',\n].\n\n" + ANSWER_RULES
    )
    r = env.step("search[red]")
    history = render_history([HistoryItem(obs, "search[red]", 0.0)], 2)
    prompt = env.spec.render_prompt(r.observation, history, r.info)
    assert "Prior to this step, you have already taken 1 step(s)." in prompt
    assert "Previous actions: search[red]" in prompt
    assert f"You are now at step 2 and your current observation is: {r.observation}." in prompt
    assert "'click[back to search]',\n'click[next >]'," in prompt


def test_compact_prompt_is_short():
    env = WebShopEnv(prompt_style="compact")
    assert env.results_per_page == 5
    longest = 0
    for seed in range(30):
        obs, info = env.reset(seed)
        history: list[HistoryItem] = []
        while True:
            prompt = env.spec.render_prompt(obs, render_history(history, 2), info)
            assert prompt.startswith("WebShop. Answer <think>...</think><action>")
            assert f"Task: {info['task']}" in prompt and "Actions: " in prompt
            longest = max(longest, len(prompt.split()))
            action = _action(expert_response(env))
            r = env.step(action)
            history.append(HistoryItem(obs, action, r.reward))
            if r.done:
                break
            obs, info = r.observation, {**info, **r.info}
    assert longest < 220  # words; about 450 tokens of a tokenizer trained on these texts


def test_compact_pages_fold_ids_and_options():
    env = WebShopEnv(prompt_style="compact")
    obs, info = env.reset(1)
    assert obs == "Search page."
    assert env.spec.render_prompt(obs, "", info).endswith("Actions: search[<query>]")
    r = env.step(_action(expert_response(env)))
    assert r.observation.startswith("Results page 1/")
    assert len(r.observation.splitlines()) == 6  # header + 5 results
    assert env.spec.render_prompt(r.observation, "", r.info).endswith(
        "Actions: click[back to search], click[next >], click[<id>]"
    )
    r = env.step(_action(expert_response(env)))
    assert r.observation.startswith("Item B0") and "click[<option>]" in env.spec.render_prompt(r.observation, "", r.info)


def test_corpus_of_the_tiny_tokenizer_includes_webshop():
    from arl.agent.corpus import corpus_texts

    texts = corpus_texts(["webshop"], 3)
    assert any("WebShop" in t for t in texts) and any(t.startswith("<think>") for t in texts)


def test_env_config_composes_and_builds():
    from omegaconf import OmegaConf

    from arl.run.checks import validate_config
    from arl_testing import compose

    cfg = compose(["env=webshop", "env.kwargs.prompt_style=full"])
    validate_config(cfg)
    assert cfg.env.name == "webshop" and cfg.env.max_turns == 15
    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    env = make_env("webshop", **{**kwargs, "data_dir": None})  # $WEBSHOP_DATA may point at real files
    assert env.spec.max_turns == 15 and env.results_per_page == 10
    assert env.reset(0)[0] == "Search"
