"""WebShop: generated catalogue and WebShop file loaders, BM25 search, pages, the paper's reward,
the text env, its prompts and the scripted shopper (expert)."""

from arl.envs.webshop.catalogue import Product, generate_catalogue, load_attributes, load_products
from arl.envs.webshop.env import WebShopEnv, parse_action
from arl.envs.webshop.expert import expert_action, expert_response, goal_query
from arl.envs.webshop.goals import (
    Goal,
    generate_goals,
    human_goals,
    load_goal_query_map,
    load_human_instructions,
    load_instruction_texts,
    split_indices,
    synthetic_goals,
)
from arl.envs.webshop.prompt import render_compact_prompt, render_prompt
from arl.envs.webshop.reward import ScoreBreakdown, token_set_ratio, webshop_score

__all__ = [
    "Goal",
    "Product",
    "ScoreBreakdown",
    "WebShopEnv",
    "expert_action",
    "expert_response",
    "generate_catalogue",
    "generate_goals",
    "goal_query",
    "human_goals",
    "load_attributes",
    "load_goal_query_map",
    "load_human_instructions",
    "load_instruction_texts",
    "load_products",
    "parse_action",
    "render_compact_prompt",
    "render_prompt",
    "split_indices",
    "synthetic_goals",
    "token_set_ratio",
    "webshop_score",
]
