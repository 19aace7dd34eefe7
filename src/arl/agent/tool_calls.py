"""Native tool calls: OpenAI-style function calling over the chat template, token-exact.

An agent that calls tools the OpenAI way offers ``tools`` (JSON-schema function descriptions) with its
messages; the chat template renders them into the prompt, the model writes its family's call format in
its answer, and a *tool parser* turns the sampled text into structured calls. The parser only reads the
text: the sampled ids stay what trains, whatever the parse.

Parsers (``rollout.tool_parser``, named as vLLM's ``--tool-call-parser``):

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block a call (Hermes, Qwen2.5,
  Qwen3, and the templates this project ships). An unclosed last block runs to the end of the text.
- ``qwen3_xml``: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>``
  (Qwen3-Coder); a value is converted by the type its tool's schema gives the parameter (string otherwise).

Both follow vLLM's conventions: the answer's ``content`` is the text before the first call (white space at
its end dropped, so that the shipped templates render a well-formed answer back exactly as it was written;
``""`` when the calls come first), and a call that does not parse leaves the whole answer as text with no call
(:attr:`ParsedToolText.error` says why): the agent sees text, the turn counts as an invalid call.

The same module holds the message forms both sides of a rollout share, so that the built-in agent loop and an
``openai``-client program send the same conversation: :func:`assistant_message` (an answer as a chat message),
:func:`observation_messages` (the environment's answer: one ``tool`` message a call, or a ``user`` message
after an answer without calls), and :func:`normalize_message` / :func:`normalize_tools` (a request's messages
and tools in the form the chat template renders: text content, arguments as objects).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arl.envs.base import ToolCall, format_call_action

ROLES = ("system", "developer", "user", "assistant", "tool")
TOOL_CHOICES = ("auto", "none", "required")  # or {"type": "function", "function": {"name": ...}}


@dataclass(frozen=True)
class ParsedToolText:
    """What a tool parser read in an answer.

    Attributes:
        content: the text before the first call, without white space at its end (the whole text when there is
            no call or a call did not parse).
        calls: the calls, in order.
        error: why a call did not parse ("" when every call did, or there was none).
    """

    content: str
    calls: tuple[ToolCall, ...] = ()
    error: str = ""


Parser = Callable[[str, Sequence[Mapping[str, Any]]], ParsedToolText]
_PARSERS: dict[str, Parser] = {}


def register_parser(name: str) -> Callable[[Parser], Parser]:
    """Decorator registering a tool parser ``(text, tools) -> ParsedToolText`` under ``name``."""

    def decorator(fn: Parser) -> Parser:
        if name in _PARSERS:
            raise ValueError(f"tool parser {name!r} is already registered")
        _PARSERS[name] = fn
        return fn

    return decorator


def parser_names() -> tuple[str, ...]:
    """The registered tool parsers, sorted (``rollout.tool_parser``'s valid values)."""
    return tuple(sorted(_PARSERS))


def get_parser(name: str) -> Parser:
    """The tool parser ``name``; a clear error for an unknown one."""
    if name not in _PARSERS:
        raise ValueError(f"unknown tool parser {name!r}; valid: {', '.join(parser_names())} (rollout.tool_parser)")
    return _PARSERS[name]


def parse_tool_calls(text: str, parser: str, tools: Sequence[Mapping[str, Any]] = ()) -> ParsedToolText:
    """The calls in ``text`` read by ``parser`` (a registered name), given the ``tools`` offered (their
    schemas type a ``qwen3_xml`` call's parameters)."""
    return get_parser(parser)(text or "", tools)


_HERMES_START, _HERMES_END = "<tool_call>", "</tool_call>"
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)


@register_parser("hermes")
def parse_hermes(text: str, tools: Sequence[Mapping[str, Any]] = ()) -> ParsedToolText:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (module docstring)."""
    start = text.find(_HERMES_START)
    if start < 0:
        return ParsedToolText(text)
    calls = []
    for match in _HERMES.finditer(text, start):
        body = match.group(1) if match.group(1) is not None else match.group(2)
        try:
            value = json.loads(body)
        except ValueError as err:
            return ParsedToolText(text, (), f"a <tool_call> that is not JSON ({err})")
        problem = _call_problem(value)
        if problem:
            return ParsedToolText(text, (), problem)
        calls.append(ToolCall(value["name"], value.get("arguments", {})))
    if not calls:
        return ParsedToolText(text, (), "an empty <tool_call>")
    return ParsedToolText(text[:start].rstrip(), tuple(calls))


def _call_problem(value: Any) -> str:
    """Why a decoded hermes call is not one ("" when it is): an object with a string ``name`` and object
    ``arguments`` (absent: none)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return "a <tool_call> without a function name"
    if not isinstance(value.get("arguments", {}), dict):
        return f"the arguments of {value['name']!r} are not a JSON object"
    return ""


_XML_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)\Z", re.DOTALL)
_XML_FUNCTION = re.compile(r"\s*<function=([^>\s]+)>(.*?)(?:</function>\s*|\Z)", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


@register_parser("qwen3_xml")
def parse_qwen3_xml(text: str, tools: Sequence[Mapping[str, Any]] = ()) -> ParsedToolText:
    """``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`` blocks (module
    docstring): a value loses one leading and one trailing newline and is typed by its tool's schema."""
    start = text.find(_HERMES_START)
    if start < 0:
        return ParsedToolText(text)
    schemas = {t["name"]: t.get("parameters") or {} for t in (_function(tool) for tool in tools) if t}
    calls = []
    for match in _XML_CALL.finditer(text, start):
        body = match.group(1) if match.group(1) is not None else match.group(2)
        function = _XML_FUNCTION.match(body)
        if function is None:
            return ParsedToolText(text, (), "a <tool_call> without <function=NAME>")
        name, inner = function.group(1), function.group(2)
        properties = (schemas.get(name) or {}).get("properties") or {}
        arguments: dict[str, Any] = {}
        for parameter in _XML_PARAMETER.finditer(inner):
            key, raw = parameter.group(1), parameter.group(2)
            raw = raw.removeprefix("\n")
            raw = raw.removesuffix("\n")
            arguments[key] = _typed(raw, (properties.get(key) or {}).get("type"))
        calls.append(ToolCall(name, arguments))
    if not calls:
        return ParsedToolText(text, (), "an empty <tool_call>")
    return ParsedToolText(text[:start].rstrip(), tuple(calls))


def _typed(raw: str, kind: Any) -> Any:
    """A ``qwen3_xml`` parameter value as its schema's type says (the text itself when it does not read as one)."""
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds or not kinds or kinds == [None]:
        return raw
    try:
        if "integer" in kinds and re.fullmatch(r"\s*-?\d+\s*", raw):
            return int(raw)
        if "number" in kinds:
            return float(raw) if not re.fullmatch(r"\s*-?\d+\s*", raw) else int(raw)
        if "boolean" in kinds and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        if {"object", "array", "null"} & set(kinds):
            return json.loads(raw)
    except ValueError:
        pass
    return raw


# ------------------------------------------------------------------------------------------ message forms
def _function(tool: Any) -> dict[str, Any] | None:
    """The ``function`` part of an OpenAI tool (``{"type": "function", "function": {...}}``), or None."""
    if isinstance(tool, Mapping) and tool.get("type", "function") == "function" and isinstance(tool.get("function"), Mapping):
        return dict(tool["function"])
    return None


def normalize_tools(tools: Any) -> list[dict[str, Any]]:
    """A request's ``tools`` checked: a list of ``{"type": "function", "function": {"name": ..., "parameters":
    {...}}}`` (``description`` and ``parameters`` optional). Raises ``ValueError`` naming what is wrong."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ValueError(f"'tools' must be a list of functions; got {type(tools).__name__}")  # noqa: TRY004 - a bad request
    out = []
    for tool in tools:
        function = _function(tool)
        if function is None or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"each tool is {{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}}; "
                             f"got {tool!r}"[:500])
        if "parameters" in function and not isinstance(function["parameters"], Mapping):
            raise ValueError(f"the parameters of tool {function['name']!r} must be a JSON schema object")
        out.append({"type": "function", "function": function})
    return out


def tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """The function names of ``tools``."""
    return [f["name"] for f in (_function(t) for t in tools) if f]


def _text_content(content: Any, role: str) -> str:
    """A message's content as text: a string, None (an assistant's that only calls), or a list of text parts
    (joined by newlines, as vLLM does)."""
    if isinstance(content, str):
        return content
    if content is None and role in ("assistant", "tool"):
        return ""
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    raise ValueError(f"a {role} message's content must be text or a list of text parts; got {content!r}"[:500])


def _arguments(value: Any) -> Any:
    """A call's arguments as the template renders them: an object (a JSON string is decoded; one that does not
    decode to an object stays the string)."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, dict) else value
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError(f"a tool call's arguments must be a JSON object or its text; got {value!r}"[:500])


def normalize_message(message: Any) -> dict[str, Any]:
    """One request message in the form the chat template renders and the gateway compares: ``role`` and text
    ``content`` always; an assistant's ``tool_calls`` (``[{"id", "type": "function", "function": {"name",
    "arguments": object}}]``) when it has calls; a tool message's ``tool_call_id`` (and ``name`` when given).
    ``developer`` reads as ``system``. Raises ``ValueError`` naming what is wrong."""
    if not isinstance(message, Mapping) or message.get("role") not in ROLES:
        raise ValueError(f"each message needs a role ({', '.join(ROLES)}) and a text content; got {message!r}"[:500])
    role = "system" if message["role"] == "developer" else message["role"]
    out: dict[str, Any] = {"role": role, "content": _text_content(message.get("content"), role)}
    calls = message.get("tool_calls") if role == "assistant" else None
    if calls:
        if not isinstance(calls, list):
            raise ValueError(f"an assistant message's tool_calls must be a list; got {calls!r}"[:500])
        normal = []
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
                raise ValueError(  # noqa: TRY004 - a bad request, answered 400
                    f"each tool call is {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}; got {call!r}"[:500])
            normal.append({"id": str(call.get("id") or ""), "type": "function",
                           "function": {"name": function["name"], "arguments": _arguments(function.get("arguments", {}))}})
        out["tool_calls"] = normal
    elif message.get("content") is None and role == "assistant":
        raise ValueError("an assistant message without tool_calls needs a text content")
    if role == "tool":
        if not isinstance(message.get("tool_call_id", ""), str):
            raise ValueError(f"a tool message's tool_call_id must be a string; got {message.get('tool_call_id')!r}")
        out["tool_call_id"] = message.get("tool_call_id", "")
        if isinstance(message.get("name"), str):
            out["name"] = message["name"]
    return out


def same_answer(sent: Mapping[str, Any], echoed: Mapping[str, Any]) -> bool:
    """Whether ``echoed`` (a normalized assistant message a program sent back) is the answer ``sent`` (as the
    gateway answered it, normalized): the same text and the same calls (ids, names, arguments)."""
    if echoed.get("role") != "assistant" or sent.get("content", "") != echoed.get("content", ""):
        return False
    return list(sent.get("tool_calls") or []) == list(echoed.get("tool_calls") or [])


@dataclass(frozen=True)
class NativeAnswer:
    """An answer in the native tool format, as the agent loop and the gateway both read it.

    Attributes:
        message: the assistant message for the conversation (normalized: ``content``, ``tool_calls``).
        action: what the environment is sent: the calls (:func:`~arl.envs.base.format_call_action`, one block
            a call) or, without calls, the text.
        error: why a call did not parse ("": it did, or there was none).
    """

    message: dict[str, Any]
    action: str
    error: str = ""
    calls: tuple[ToolCall, ...] = ()


def call_id(prefix: str, k: int) -> str:
    """The id of the ``k``-th call of an answer: ``call_<prefix>_<k>``."""
    return f"call_{prefix}_{k}"


def assistant_message(content: str, calls: Sequence[ToolCall], id_prefix: str) -> dict[str, Any]:
    """An answer as a normalized chat message (:func:`normalize_message`'s form)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": call_id(id_prefix, k), "type": "function",
                                  "function": {"name": c.name, "arguments": dict(c.arguments)}}
                                 for k, c in enumerate(calls)]
    return message


def read_native_answer(text: str, parser: str, tools: Sequence[Mapping[str, Any]], id_prefix: str) -> NativeAnswer:
    """The answer ``text`` read by ``parser``: its message, the environment's action, and why a call did not
    parse."""
    parsed = parse_tool_calls(text, parser, tools)
    message = assistant_message(parsed.content, parsed.calls, id_prefix)
    action = "".join(format_call_action(c) for c in parsed.calls) if parsed.calls else parsed.content
    return NativeAnswer(message, action, parsed.error, parsed.calls)


def observation_messages(answer: Mapping[str, Any], observation: str) -> list[dict[str, Any]]:
    """The environment's answer to ``answer`` (an assistant message) as the conversation's next messages: one
    ``tool`` message a call (each with the call's id and the observation), or one ``user`` message holding the
    observation when the answer made no call."""
    calls = answer.get("tool_calls") or []
    if not calls:
        return [{"role": "user", "content": observation}]
    return [{"role": "tool", "tool_call_id": c["id"], "content": observation} for c in calls]


def as_openai_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A normalized assistant message as the OpenAI API answers it: ``content`` null when empty and calls
    are made, each call's ``arguments`` a JSON string."""
    calls = message.get("tool_calls") or []
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or (None if calls else "")}
    if calls:
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["function"]["name"],
                                           "arguments": c["function"]["arguments"] if isinstance(
                                               c["function"]["arguments"], str) else json.dumps(c["function"]["arguments"])}}
                             for c in calls]
    return out


def renders_tools(tokenizer) -> bool:
    """Whether ``tokenizer``'s chat template renders a tool list (the prompt with one differs from the prompt
    without, and names the tool)."""
    probe = [{"type": "function", "function": {"name": "probe_tool_zq", "description": "probe",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "user", "content": "hello"}]
    try:
        with_tools = tokenizer.apply_chat_template(messages, tools=probe, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that fails on tools does not render them
        return False
    plain = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return with_tools != plain and "probe_tool_zq" in with_tools


__all__ = [
    "NativeAnswer",
    "ParsedToolText",
    "ToolCall",
    "as_openai_message",
    "assistant_message",
    "get_parser",
    "normalize_message",
    "normalize_tools",
    "observation_messages",
    "parse_tool_calls",
    "parser_names",
    "read_native_answer",
    "register_parser",
    "renders_tools",
    "same_answer",
    "tool_names",
]
