"""A function-calling agent: one math_tool episode with the ``openai`` client's ``tools=`` (``env=program``).

The agent offers the model a ``python`` function, runs the calls the model makes in the environment's sandbox,
sends each result back as a ``role: "tool"`` message, and stops when the model answers with ``\\boxed{...}``
(or the turns run out). It is written as any OpenAI function-calling agent is (the conversation is the
client's messages, the assistant message appended as the server answered it); ARL's recording gateway renders
the tools with the policy's chat template, reads the model's calls with ``rollout.tool_parser`` and trains on
the tokens the policy sampled. An answer whose call does not parse comes back as text; the gateway counts it
as an invalid call, and the agent reports the turns the environment refused (``invalid_calls``).

Greedy, it plays the same episodes as ARL's built-in loop on ``env=math_tool env.kwargs.tool_format=native``,
token for token and reward for reward (tests/integration/test_native_tools.py):

    python src/train.py env=program "env.kwargs.command=[python,examples/openai_math_tool_agent.py]" bc.enabled=false debug=smoke

``ARL_PROMPT_STYLE`` (``full``, the default, or ``compact``) and ``ARL_MAX_TURNS`` (default 5) choose the
environment's prompt and episode length.
"""

from __future__ import annotations

import json
import os
import urllib.request

from openai import OpenAI

from arl.envs.base import ToolCall, format_call_action
from arl.envs.math_tool.env import MathToolEnv


def main() -> None:
    reward_url = os.read(int(os.environ["ARL_REWARD_FD"]), 4096).decode()  # once, first: no tool inherits it
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    env = MathToolEnv(tool_format="native", prompt_style=os.environ.get("ARL_PROMPT_STYLE", "full"),
                      max_turns=int(os.environ.get("ARL_MAX_TURNS", "5")))
    observation, info = env.reset(seed=int(os.environ["ARL_TASK_SEED"]))
    messages: list[dict] = [{"role": "user", "content": env.spec.render_prompt(observation, "", info)}]
    rewards, refused, won = [], [], False
    for turn in range(env.spec.max_turns):
        answer = client.chat.completions.create(model="arl-policy", messages=messages, tools=list(env.spec.tools))
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        calls = message.tool_calls or []
        if calls:  # the environment takes the calls as ARL's blocks; its result answers each call
            action = "".join(format_call_action(ToolCall(c.function.name, json.loads(c.function.arguments)))
                             for c in calls)
        else:
            action = message.content or ""
        result = env.step(action)
        rewards.append(result.reward)
        if result.info.get("invalid_action"):
            refused.append(turn)
        won = bool(result.info.get("won", won))
        if result.done:
            break
        if calls:
            messages += [{"role": "tool", "tool_call_id": c.id, "content": result.observation} for c in calls]
        else:
            messages.append({"role": "user", "content": result.observation})
    report = {"reward": sum(rewards), "rewards": rewards, "won": won, "invalid_calls": refused,
              "task_type": info.get("task_type", "math")}
    request = urllib.request.Request(reward_url, data=json.dumps(report).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request, timeout=30).read()


if __name__ == "__main__":
    main()
