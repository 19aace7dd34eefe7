"""Text the environments render, to train the embedded tokenizer on (the embedded model is built
on it by :func:`arl.run.builders.tiny_model`).

For each env, episodes are played by the env's expert (or random admissible actions when it has
none) and every prompt, history line and answer they produce is collected, so the tokenizer's
merges fit what the policy will read and write. The texts are the envs' raw prompts (no chat
template), which is why this plays its own short episodes instead of running the agent loop:
the cache key of every embedded model, and so every result measured with one, depends on these
exact texts.
"""

from __future__ import annotations

import random

from arl.agent.experts import get_expert, has_expert
from arl.agent.parsing import TAGS
from arl.agent.prompts import HistoryItem, render_history
from arl.envs.registry import make_env

# Generic text so that words outside the envs' own vocabulary still tokenize compactly.
GENERIC = [
    "You are a helpful assistant. Think step by step, then answer in the required format.",
    "The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 3.14 -2 1/2.",
    "search[red shoes for women] click[buy now] click[next >] click[< prev] click[back to search]",
    "go to countertop 1, take mug 1 from countertop 1, open fridge 1, heat apple 1 with microwave 1",
    "```python\nprint(2 + 2)\n```\nCode execution result: 4\nThe answer is \\boxed{4}.",
]


def corpus_texts(env_names: list[str], n_seeds: int, max_turns: int = 6) -> list[str]:
    """Prompts and expert answers of ``n_seeds`` episodes per env; deterministic."""
    texts = list(GENERIC) + [" ".join(TAGS)]
    for name in env_names:
        expert = get_expert(name) if has_expert(name) else None
        rng = random.Random(0)
        for seed in range(n_seeds):
            env = make_env(name)
            obs, info = env.reset(seed)
            history: list[HistoryItem] = []
            for _ in range(max_turns):
                if expert is not None:
                    answer = expert(env)
                    action = answer.split("<action>")[-1].split("</action>")[0]
                else:
                    action = rng.choice(info.get("admissible_actions") or [env.spec.invalid_action])
                    answer = f"<think>try {action}</think><action>{action}</action>"
                hist = render_history(history, 2, show_observations=seed % 2 == 1)
                texts.append(env.spec.render_prompt(obs, hist, info))
                texts.append(answer)
                result = env.step(action)
                history.append(HistoryItem(obs, action, result.reward))
                if result.done:
                    break
                obs, info = result.observation, {**info, **result.info}
            env.close()
    return texts
