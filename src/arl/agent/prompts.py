"""Prompt rendering shared by all environments.

A turn's prompt is one user message: the environment renders the task, the rules and the current
observation (``EnvSpec.render_prompt``); this module renders the history window that goes in it
and turns the message into token ids with the tokenizer's chat template.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arl.envs.base import EnvSpec


@dataclass(frozen=True)
class HistoryItem:
    """One past turn as the next prompt shows it."""

    observation: str  # the observation the action was taken in
    action: str  # the parsed action, or the raw reason when invalid
    reward: float


def render_history(items: Sequence[HistoryItem], window: int, show_observations: bool = False) -> str:
    """The last ``window`` turns as text ("" when the window is 0 or there is no history).

    Without observations: ``Previous actions: up, left (invalid)``. With observations, one block
    per turn: ``[Turn k] Observation: ...`` then ``Action: ...``.
    """
    if window <= 0 or not items:
        return ""
    recent = list(items)[-window:]
    first = len(items) - len(recent) + 1
    if not show_observations:
        return "Previous actions: " + ", ".join(item.action for item in recent)
    blocks = [
        f"[Turn {first + i}] Observation:\n{item.observation}\nAction: {item.action}" for i, item in enumerate(recent)
    ]
    return "\n".join(blocks)


def build_messages(spec: EnvSpec, observation: str, history_text: str, info: dict[str, Any]) -> list[dict[str, str]]:
    """The chat messages of one turn: the env's system message (``info["system_prompt"]``, e.g. a
    data file's), if any, then the rendered user message."""
    user = {"role": "user", "content": spec.render_prompt(observation, history_text, info)}
    system = info.get("system_prompt")
    return [{"role": "system", "content": system}, user] if system else [user]


def encode_prompt(tokenizer, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()) -> list[int]:
    """Token ids of ``messages`` with the assistant turn opened (chat template, no extra BOS); ``tools``: the
    functions offered (native tool calls, :mod:`arl.agent.tool_calls`), rendered by the template."""
    text = tokenizer.apply_chat_template(messages, tools=list(tools) or None, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class TemplateError(ValueError):
    """The chat template does not render a conversation as a growing prefix."""


_PROBE_USER = ("Task: probe.\nState:\n#_@_#", "Result: moved.\nState:\n#@__#")
_PROBE_ANSWER = "<think>plan: left</think><action>left</action>"


class TrajectoryTemplate:
    """Token ids of a multi-turn conversation built as one growing stream (``trajectory`` mode).

    The stream of an episode is ``prompt_0 + response_0 + cont_1 + response_1 + ...`` where the
    responses are the ids exactly as sampled and ``cont_k`` closes the assistant turn and renders
    the next messages (a user message, or the ``tool`` messages answering native tool calls) with the
    assistant turn opened. ``cont_k`` comes from the chat template itself (the text it adds after an
    assistant message and the following messages), so the stream equals what the template renders
    for the conversation, provided the template renders conversations as growing prefixes. :meth:`check`
    verifies that with a probe conversation; a template that rewrites earlier turns (e.g. one that drops
    past ``<think>`` blocks) fails it, and the loop falls back to ``turn`` mode.

    Args:
        tokenizer: the policy's tokenizer.
        tools: the functions every conversation of the stream offers (native tool calls; rendered by the
            template in the first prompt, so the probes render them too).
    """

    def __init__(self, tokenizer, tools: Sequence[dict[str, Any]] = ()):
        self.tokenizer = tokenizer
        self.tools = list(tools)
        self._render = lambda msgs, gen: tokenizer.apply_chat_template(
            msgs, tools=self.tools or None, tokenize=False, add_generation_prompt=gen)
        eos = tokenizer.eos_token_id
        self.eos_ids = {eos} if eos is not None else set()
        # the special tokens (an engine stops on some of them: its generation config's EOS ids)
        self.special_ids = set(tokenizer.all_special_ids) | {
            i for i, token in getattr(tokenizer, "added_tokens_decoder", {}).items() if token.special}
        self._end_of_assistant: str | None = None

    def check(self) -> None:
        """Raise :class:`TemplateError` unless the template renders conversations as prefixes (with tools: a
        tool result after an answer too)."""
        u0, u1 = _PROBE_USER
        msgs = [{"role": "user", "content": u0}]
        first = self._render(msgs, True)
        msgs.append({"role": "assistant", "content": _PROBE_ANSWER})
        closed = self._render(msgs, False)
        if not closed.startswith(first + _PROBE_ANSWER):
            raise TemplateError("the chat template rewrites the assistant message (its content is not kept verbatim after the generation prompt)")
        probes = [[{"role": "user", "content": u1}]]
        if self.tools:
            probes.append([{"role": "tool", "tool_call_id": "probe", "content": u1}])
        for following in probes:
            second = self._render(msgs + following, True)
            if not second.startswith(closed):
                raise TemplateError(f"the chat template re-renders earlier turns when a {following[0]['role']} "
                                    "message follows")
            if u1 not in second[len(closed):]:
                raise TemplateError(f"the chat template does not render the next {following[0]['role']} message "
                                    "after the previous turns")
        self._end_of_assistant = closed[len(first) + len(_PROBE_ANSWER):]

    def first_ids(self, user_text: str, system: str = "") -> list[int]:
        """Ids of the first prompt: the system message (if any), the first user message, the
        assistant turn opened."""
        messages = [{"role": "system", "content": system}] if system else []
        return encode_prompt(self.tokenizer, messages + [{"role": "user", "content": user_text}], self.tools)

    def continuation_ids(self, user_text: str, last_response_ids: Sequence[int]) -> list[int]:
        """Ids that follow a sampled response: close the assistant turn, the next user message,
        the assistant turn opened again (:meth:`continuation_of`)."""
        return self.continuation_of([{"role": "user", "content": user_text}], last_response_ids)

    def continuation_of(self, messages: Sequence[dict[str, Any]], last_response_ids: Sequence[int]) -> list[int]:
        """Ids that follow a sampled response: close the assistant turn, render ``messages`` (a user message,
        or the tool messages answering the response's calls), open the assistant turn again.

        When the response already ends with the token that closes the turn (sampling stopped on it:
        the EOS token, or another special token the engine stops on, such as ``<|im_end|>`` under a
        tokenizer whose EOS is ``<|endoftext|>``), that token is not repeated.
        """
        if self._end_of_assistant is None:
            self.check()
        u0, _ = _PROBE_USER
        msgs = [{"role": "user", "content": u0}, {"role": "assistant", "content": _PROBE_ANSWER}]
        closed = self._render(msgs, False)
        following = self._render(msgs + list(messages), True)
        if not following.startswith(closed):
            raise TemplateError("the chat template re-renders earlier turns when a message follows")
        text = self._end_of_assistant + following[len(closed):]
        last = last_response_ids[-1] if last_response_ids else None
        if last is not None and (last in self.eos_ids or last in self.special_ids):
            stop_text = self.tokenizer.decode([last], skip_special_tokens=False)
            if stop_text and text.startswith(stop_text):
                text = text[len(stop_text):]
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
