"""Strict parser of model answers: ``<think>...</think><action>...</action>`` and nothing else.

A response is valid when, after stripping surrounding white space, it is exactly one ``<think>``
block followed by exactly one ``<action>`` block (white space allowed between them), the action is
not empty, and, for environments with admissible actions, the action is one of them. Anything
else is an invalid action: the caller sends the environment's no-op and records the reason.

A valid action can still be refused by the environment: one that answers its step with
``info["invalid_action"]`` true makes the turn invalid after all (:func:`env_verdict`), with the
same consequences (the format penalty, the valid-action ratio).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arl.agent.tool_calls import read_native_answer

TAGS = ("<think>", "</think>", "<action>", "</action>")
_FORMAT = re.compile(r"<think>(.*?)</think>\s*<action>(.*?)</action>", re.DOTALL)
_SPACES = re.compile(r"\s+")
REJECTED_BY_ENV = "rejected by env"  # the reason of a well-formed action the env marked invalid


@dataclass(frozen=True)
class ParsedAction:
    """Result of :func:`parse_response`.

    Attributes:
        valid: the response followed the format (and the action is admissible).
        action: the extracted action (canonical admissible spelling when matched), or "" if none.
        reason: "" when valid, else a short machine-readable reason.
        think: the thought text, or "".
        message: native tool calls (:mod:`arl.agent.tool_calls`): the answer as a chat message (its text and
            calls); None for ``<action>`` answers.
    """

    valid: bool
    action: str
    reason: str = ""
    think: str = ""
    message: dict | None = None


def _normalise(action: str) -> str:
    return _SPACES.sub(" ", action.strip()).lower()


def parse_response(text: str, admissible: Sequence[str] | None = None) -> ParsedAction:
    """Parse one model answer.

    Args:
        text: the decoded response (special tokens removed).
        admissible: when given, the action must match one of these (case and white space
            insensitive); the returned action is then the admissible spelling.
    """
    if text is None or not text.strip():
        return ParsedAction(False, "", "empty")
    body = text.strip()
    for tag in TAGS:
        count = body.count(tag)
        if count == 0:
            return ParsedAction(False, "", f"missing {tag}")
        if count > 1:
            return ParsedAction(False, "", f"repeated {tag}")
    match = _FORMAT.fullmatch(body)
    if match is None:
        order_ok = body.index("<think>") < body.index("</think>") < body.index("<action>") < body.index("</action>")
        return ParsedAction(False, "", "text outside tags" if order_ok else "wrong tag order")
    think, action = match.group(1).strip(), match.group(2).strip()
    if not action:
        return ParsedAction(False, "", "empty action", think)
    if admissible is not None:
        wanted = _normalise(action)
        for candidate in admissible:
            if _normalise(candidate) == wanted:
                return ParsedAction(True, candidate, "", think)
        return ParsedAction(False, action, "not admissible", think)
    return ParsedAction(True, action, "", think)


def env_verdict(parsed: ParsedAction, info: Mapping[str, Any]) -> ParsedAction:
    """``parsed`` after the environment's answer to it: a valid action the env marked
    ``info["invalid_action"]`` (true) becomes invalid, reason :data:`REJECTED_BY_ENV` (its text kept);
    anything else is returned as it is."""
    if parsed.valid and info.get("invalid_action"):
        return ParsedAction(False, parsed.action, REJECTED_BY_ENV, parsed.think, parsed.message)
    return parsed


def parse_native(text: str, parser: str, tools: Sequence[Mapping[str, Any]], id_prefix: str) -> ParsedAction:
    """A native tool-call answer (:mod:`arl.agent.tool_calls`) read by ``parser``: ``action`` is what the env
    receives (the calls, or the text of an answer without one), ``message`` the answer as a chat message. It
    is invalid when it is empty (reason ``empty``) or a call in it does not parse (the parser's reason); the env
    still receives its text, as an agent program would send it."""
    answer = read_native_answer(text or "", parser, tools, id_prefix)
    reason = "empty" if not (text or "").strip() else answer.error
    return ParsedAction(not reason, answer.action, reason, "", answer.message)
