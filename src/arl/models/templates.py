"""The chat templates the project ships, with native tool calls.

Both are ChatML (``<|im_start|>role\\n...<|im_end|>\\n``) and render a conversation without tools exactly as
the templates they replace did (the tiny model's, and the one SmolLM2-135M-Instruct's GGUF carries), so every
prompt of every earlier run is unchanged. Given ``tools`` (``apply_chat_template(messages, tools=...)``) they
render them the Hermes / Qwen way, which the ``hermes`` tool parser reads back:

- a system turn first: the system message (or SmolLM2's default one) and the tool list, one JSON object a
  line inside ``<tools></tools>``, with how to call them;
- an assistant message with ``tool_calls``: its content, then one ``<tool_call>\\n{"name": ..., "arguments":
  ...}\\n</tool_call>`` block a call;
- ``tool`` messages: one ``<tool_response>`` block each, consecutive ones in one user turn.

:func:`with_tool_support` swaps a tokenizer's template for its tool-capable twin when it is one of the known
tool-less ones (a folder built or converted before, a committed behaviour-cloning start), so that every tiny
or SmolLM2 folder renders tools.
"""

from __future__ import annotations

TOOL_INSTRUCTIONS = (
    "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\\n<tools>"
)
CALL_INSTRUCTIONS = (
    "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call>"
)
# compact, for the tiny model (it learns the format from behaviour cloning, not from prose)
TINY_TOOL_INSTRUCTIONS = "# Tools\\n<tools>"
TINY_CALL_INSTRUCTIONS = "\\n</tools>\\nCall one as <tool_call>\\n{\\\"name\\\": ..., \\\"arguments\\\": {...}}\\n</tool_call>"


def chatml_template(default_system: str | None, tool_instructions: str, call_instructions: str) -> str:
    """A ChatML template with Hermes-style tools (module docstring); ``default_system``: the system message
    rendered when the conversation has none (SmolLM2's), or None for none."""
    default = "" if default_system is None else default_system
    no_system_block = (
        "{{- '<|im_start|>system\\n" + default + "<|im_end|>\\n' }}" if default_system is not None else ""
    )
    return (
        "{%- if tools %}"
        "{{- '<|im_start|>system\\n' }}"
        "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}"
        + ("{%- else %}{{- '" + default + "\\n\\n' }}" if default_system is not None else "")
        + "{%- endif %}"
        "{{- '" + tool_instructions + "' }}"
        "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
        "{{- '" + call_instructions + "<|im_end|>\\n' }}"
        "{%- elif messages[0]['role'] != 'system' %}" + no_system_block + "{%- endif %}"
        "{%- for message in messages %}"
        "{%- if message['role'] == 'system' and loop.first and tools %}"
        "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
        "{{- '<|im_start|>assistant\\n' + (message['content'] or '') }}"
        "{%- for call in message['tool_calls'] %}"
        "{%- set f = call['function'] if call.get('function') else call %}"
        "{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}"
        "{{- '<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' }}"
        "{%- if f['arguments'] is string %}{{- f['arguments'] }}{%- else %}{{- f['arguments'] | tojson }}{%- endif %}"
        "{{- '}\\n</tool_call>' }}"
        "{%- endfor %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- elif message['role'] == 'tool' %}"
        "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
        "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
        "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
        "{%- else %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


#: the tiny model's template before tools (what built folders and committed starts carry)
TINY_PLAIN_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TINY_TEMPLATE = chatml_template(None, TINY_TOOL_INSTRUCTIONS, TINY_CALL_INSTRUCTIONS)

SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#: the template SmolLM2-135M-Instruct's GGUF carries (no tools)
SMOLLM2_PLAIN_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SMOLLM2_TEMPLATE = chatml_template(SMOLLM2_DEFAULT_SYSTEM, TOOL_INSTRUCTIONS, CALL_INSTRUCTIONS)

#: a known tool-less template -> its tool-capable twin (same rendering without tools)
TOOL_TWINS = {TINY_PLAIN_TEMPLATE.strip(): TINY_TEMPLATE, SMOLLM2_PLAIN_TEMPLATE.strip(): SMOLLM2_TEMPLATE}


def with_tool_support(tokenizer) -> bool:
    """Give ``tokenizer`` the tool-capable twin of its template when it carries a known tool-less one; returns
    whether it was swapped. Any other template is left as it is (a model's own, which may render tools)."""
    template = getattr(tokenizer, "chat_template", None)
    twin = TOOL_TWINS.get(template.strip()) if isinstance(template, str) else None
    if twin is None:
        return False
    tokenizer.chat_template = twin
    return True


__all__ = ["SMOLLM2_TEMPLATE", "TINY_TEMPLATE", "TOOL_TWINS", "chatml_template", "with_tool_support"]
