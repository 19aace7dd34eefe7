"""Expert episodes for behaviour cloning, rendered through the very prompts the policy sees.

Each environment package provides an expert as a function ``expert_response(env) -> str`` that
answers the env's *current* state in the policy's output format. Expert episodes are recorded as
ordinary :class:`~arl.agent.records.Episode` objects whose response ids are the tokenised expert
answers, so behaviour cloning and RL share one sample builder.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from arl.agent.loop import AgentLoop
from arl.agent.mix import MixLoop
from arl.agent.parsing import env_verdict
from arl.agent.prompts import HistoryItem
from arl.agent.records import Episode, Turn, anchor_key
from arl.envs.registry import make_env

_EXPERTS: dict[str, str] = {
    "sokoban": "arl.envs.sokoban.expert:expert_response",
    "alfworld": "arl.envs.alfworld.expert:expert_response",
    "math_tool": "arl.envs.math_tool.expert:expert_response",
    "webshop": "arl.envs.webshop.expert:expert_response",
}


def has_expert(env_name: str) -> bool:
    """Whether ``env_name`` has a scripted expert."""
    return env_name in _EXPERTS


def expert_path(env_name: str) -> str:
    """``"package.module:function"`` of the expert of ``env_name``; a clear error when it has none."""
    if env_name not in _EXPERTS:
        raise KeyError(f"env {env_name!r} has no expert; envs with experts: {', '.join(sorted(_EXPERTS))}")
    return _EXPERTS[env_name]


def get_expert(env_name: str) -> Callable[[object], str]:
    """The expert of ``env_name``; a clear error when the env has none."""
    module, attr = expert_path(env_name).split(":")
    return getattr(importlib.import_module(module), attr)


def expert_episodes(loop: AgentLoop | MixLoop, seeds: Sequence[int], group_offset: int = 0) -> list[Episode]:
    """Play one expert episode per seed with ``loop``'s env, prompts and tokenizer (a mix: each seed in the
    member its seed draws under the weights in force, with that member's expert, in seed order)."""
    if isinstance(loop, MixLoop):
        return _mix_expert_episodes(loop, seeds, group_offset)
    expert = get_expert(loop.env_name)
    episodes = []
    for i, seed in enumerate(seeds):
        env = make_env(loop.env_name, **loop.pool.env_kwargs)
        obs, info = env.reset(int(seed))
        ep = Episode(group_offset + i, group_offset + i, int(seed), loop.label, str(info.get("task_type", loop.env_name)))
        history: list[HistoryItem] = []
        for _ in range(loop.max_turns):
            prompt = loop.next_prompt(ep, obs, history, info)
            if prompt is None:  # trajectory stream full
                break
            text = expert(env)
            ids = loop.answer_ids(text)
            parsed = loop.parse_answer(text, info, len(ep.turns))
            result = env.step(loop.action_for(parsed))
            parsed = env_verdict(parsed, result.info)
            ep.turns.append(
                Turn(prompt, ids, [0.0] * len(ids), text, parsed.action, parsed.valid, parsed.reason,
                     float(result.reward), bool(result.done), anchor_key(str(info.get("anchor", obs))), observation=obs,
                     message=parsed.message)
            )
            history.append(HistoryItem(obs, parsed.action, float(result.reward)))
            ep.won = bool(result.info.get("won", False))
            ep.score = float(result.info.get("score", ep.score))
            if result.done:
                break
            obs, info = result.observation, {**info, **result.info}
        env.close()
        episodes.append(ep)
    return episodes


def _mix_expert_episodes(loop: MixLoop, seeds: Sequence[int], group_offset: int) -> list[Episode]:
    """:func:`expert_episodes` of a mix: each member's expert plays the seeds drawn for it; the episodes come
    back in seed order, numbered as one loop would number them."""
    chosen = loop.choose(seeds)
    out: list[Episode] = [None] * len(seeds)  # type: ignore[list-item]
    for m in loop.members:
        where = [i for i, name in enumerate(chosen) if name == m.name]
        for i, episode in zip(where, expert_episodes(m.loop, [seeds[i] for i in where])):
            episode.group_id = episode.episode_id = group_offset + i
            out[i] = episode
    return out
