"""An agent program that plays one Sokoban episode through an OpenAI-compatible endpoint (``env=program``).

ARL's recording gateway starts it once per episode with ``OPENAI_BASE_URL`` (the ``openai`` client reads
it), ``ARL_TASK_SEED`` (the level) and ``ARL_REWARD_FD`` (a pipe it reads once: where to report the
outcome), and trains on the calls it made, token for token as the policy sampled them. It renders its prompts as ARL's own
agent loop does (the env's prompt, the last turn as history), so that greedy decoding plays the same
episodes both ways:

    python src/train.py env=program "env.kwargs.command=[python,examples/openai_sokoban_agent.py]" bc.enabled=false debug=smoke

Anything that speaks to the endpoint works the same way: another language, a framework's agent, tools.
"""

from __future__ import annotations

import json
import os
import urllib.request

from openai import OpenAI

from arl.agent.parsing import parse_response
from arl.agent.prompts import HistoryItem, build_messages, render_history
from arl.envs.sokoban.env import SokobanEnv

HISTORY_WINDOW, MAX_TURNS = 1, 10


def main() -> None:
    reward_url = os.read(int(os.environ["ARL_REWARD_FD"]), 4096).decode()  # once, first: no tool inherits it
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    env = SokobanEnv(prompt_style="full")
    observation, info = env.reset(seed=int(os.environ["ARL_TASK_SEED"]))
    history: list[HistoryItem] = []
    rewards, invalid, won = [], [], False
    for turn in range(min(MAX_TURNS, env.spec.max_turns)):
        messages = build_messages(env.spec, observation, render_history(history, HISTORY_WINDOW, False), info)
        answer = client.chat.completions.create(model="arl-policy", messages=messages)
        parsed = parse_response(answer.choices[0].message.content, info.get("admissible_actions"))
        if not parsed.valid:
            invalid.append(turn)
        result = env.step(parsed.action if parsed.valid else env.spec.invalid_action)
        rewards.append(result.reward)
        history.append(HistoryItem(observation, parsed.action if parsed.valid else f"invalid ({parsed.reason})",
                                   result.reward))
        won = bool(result.info.get("won", won))
        if result.done:
            break
        observation, info = result.observation, {**info, **result.info}
    report = {"reward": sum(rewards), "rewards": rewards, "won": won, "invalid_calls": invalid, "task_type": "sokoban"}
    request = urllib.request.Request(reward_url, data=json.dumps(report).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=30).read()


if __name__ == "__main__":
    main()
