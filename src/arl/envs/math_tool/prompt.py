"""The math_tool prompt: the tool instructions, the problem, earlier turns, the latest tool result.

The agent loop renders the earlier turns (``history_text``: with ``show_observations`` each
earlier turn shows the observation it saw, i.e. the previous tool result, and its action, i.e. the
code it ran); this module puts them between the problem and the current observation.
"""

from __future__ import annotations

from typing import Any

TASK = "Solve the math problem."

RULES = (
    "Solve the math problem. You can run Python: put code in a ```python block inside <action> "
    "and you will see what it prints. When you know the answer, put \\boxed{answer} inside <action>; "
    "that ends the episode."
)
FORMAT = "Answer as <think>...</think><action>...</action>."

COMPACT_HEADER = "Math. <action>```python code```</action> runs code; <action>\\boxed{answer}</action> answers."

PROMPT_STYLES = ("full", "compact")


def _turn_line(info: dict[str, Any]) -> str:
    turn, max_turns = info.get("turn"), info.get("max_turns")
    if isinstance(turn, int) and isinstance(max_turns, int) and max_turns > 0:
        return f"Turn {turn + 1} of {max_turns}."
    return ""


def render_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``full`` user message of one turn.

    Args:
        observation: the env's latest observation (the last tool result, or the start message).
        history_text: earlier turns, rendered by the agent loop ("" for none).
        info: the env's latest info: ``task`` (the problem), ``turn`` and ``max_turns``.
    """
    parts = [RULES, FORMAT, f"Problem: {info.get('task', '')}"]
    if history_text and history_text.strip():
        parts.append(history_text.strip())
    turn = _turn_line(info)
    parts.append(f"Current observation{' (' + turn[:-1] + ')' if turn else ''}:\n{observation}")
    return "\n".join(parts)


def render_compact_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``compact`` user message: a one-line header, the problem, the history, the observation.

    For models that learn the protocol from behaviour cloning (the embedded tiny model).
    """
    parts = [COMPACT_HEADER, f"Problem: {info.get('task', '')}"]
    if history_text and history_text.strip():
        parts.append(history_text.strip())
    parts.append(f"Observation: {observation}")
    return "\n".join(parts)


PROMPT_RENDERERS = {"full": render_prompt, "compact": render_compact_prompt}

# ---- the native tool format (``tool_format: native``): the python tool is a function the chat template renders
TOOL_NAME = "python"
PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python code in a sandbox; returns what it prints (or the error).",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the code to run"}},
            "required": ["code"],
        },
    },
}
NATIVE_RULES = (
    "Solve the math problem. You can run Python with the python tool and see what it prints. "
    "When you know the answer, write \\boxed{answer} in your reply; that ends the episode."
)
NATIVE_COMPACT_HEADER = "Math. Call python to run code; \\boxed{answer} answers."


def render_native_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``full`` first user message of the native tool format: the rules and the problem (the conversation
    carries the tool results, so no history and no observation; the same message every turn)."""
    return f"{NATIVE_RULES}\nProblem: {info.get('task', '')}"


def render_native_compact_prompt(observation: str, history_text: str, info: dict[str, Any]) -> str:
    """The ``compact`` first user message of the native tool format (for BC'd tiny models)."""
    return f"{NATIVE_COMPACT_HEADER}\nProblem: {info.get('task', '')}"


NATIVE_PROMPT_RENDERERS = {"full": render_native_prompt, "compact": render_native_compact_prompt}


__all__ = [
    "COMPACT_HEADER",
    "FORMAT",
    "NATIVE_PROMPT_RENDERERS",
    "PROMPT_RENDERERS",
    "PROMPT_STYLES",
    "PYTHON_TOOL",
    "RULES",
    "TASK",
    "TOOL_NAME",
    "render_compact_prompt",
    "render_prompt",
]
