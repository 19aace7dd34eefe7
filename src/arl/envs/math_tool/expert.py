"""The math_tool expert for behaviour cloning: the scripted solution of a generated problem.

Turn 1 runs the problem's solution snippet as a tool call; once a tool result is there, the expert
boxes the last line the code printed (or the known answer when that line is not the answer, e.g.
after a sandbox failure). Deterministic, so BC data is reproducible. Under ``tool_format="native"`` the
same answers come in the native format: the tool call as a ``<tool_call>`` block of the ``python`` function
(the ``hermes`` parser's format, the one the shipped chat templates render), the final answer as text.
"""

from __future__ import annotations

import json
from typing import Any

from arl.envs.math_tool.equivalence import is_equivalent


def expert_code_response(env: Any) -> str:
    """The tool call of the current problem: its plan as the thought, its snippet as the action."""
    problem = env.problem
    if getattr(env, "tool_format", "text") == "native":
        call = json.dumps({"name": "python", "arguments": {"code": problem.code}})
        return f"<think>{problem.plan}</think>\n<tool_call>\n{call}\n</tool_call>"
    return f"<think>{problem.plan}</think><action>```python\n{problem.code}\n```</action>"


def expert_answer_response(env: Any) -> str:
    """The final answer: the last printed line of the latest tool call, boxed."""
    problem = env.problem
    run = env.tool_runs[-1] if env.tool_runs else None
    lines = [line.strip() for line in (run.stdout if run else "").splitlines() if line.strip()]
    printed = lines[-1] if lines else ""
    answer = printed if run is not None and run.ok and printed and is_equivalent(printed, problem.answer) else None
    thought = f"The code printed {printed}." if answer is not None else f"The answer is {problem.answer}."
    answer = problem.answer if answer is None else answer
    if getattr(env, "tool_format", "text") == "native":
        return f"<think>{thought}</think>\\boxed{{{answer}}}"
    return f"<think>{thought}</think><action>\\boxed{{{answer}}}</action>"


def expert_response(env: Any) -> str:
    """The expert's answer to the env's current state, in the policy's output format.

    Raises ``RuntimeError`` before ``reset`` and ``ValueError`` for problems read from a data file
    (those have no scripted solution).
    """
    if not getattr(env, "question", ""):
        raise RuntimeError("reset the environment before asking the expert")
    if getattr(env, "problem", None) is None:
        raise ValueError(
            f"the math_tool expert has scripted solutions for generated problems only, "
            f"not for data_path={getattr(env, 'data_path', None)!r}"
        )
    if not env.tool_runs:
        return expert_code_response(env)
    return expert_answer_response(env)


__all__ = ["expert_answer_response", "expert_code_response", "expert_response"]
