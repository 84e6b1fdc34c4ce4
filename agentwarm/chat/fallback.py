"""agentwarm's own prompt format, kept as the template of a tokenizer that has none.

::

    <|system|>\\n{system}\\n                      the first message, when it is a system message
                                                  with content
    <|tools|>\\n{tool as JSON}\\n...               one line per tool (sorted keys, no spaces,
                                                  ASCII), when there are tools
    <|{role} {node}|>\\n{content}\\n              every other message; `` {node}`` only when the
                                                  message has a ``"node"`` key
    {"name":...,"arguments":...}\\n              after an assistant message's content (which is
                                                  then left out when empty), one line per tool
                                                  call (ASCII JSON, arguments as given)
    <|assistant {node}|>\\n                       the generation prompt; `` {node}`` from the
                                                  template variable ``node``

This is the format agentwarm used before it rendered chat templates (``runtime/prompt.py`` and
``runtime/transcript.py``): with the byte tokenizer, :func:`~agentwarm.chat.render_ids` gives the
same ids (that format had no tool-call lines: the runtime recorded a reply's calls in its text).
"""

from __future__ import annotations

from agentwarm.chat.template import ChatTemplate

__all__ = ("FALLBACK", "FALLBACK_SOURCE")

FALLBACK_SOURCE = (
    "{%- macro header(role, node) -%}"
    "{{- '<|' + role + ((' ' + node) if node else '') + '|>\\n' -}}"
    "{%- endmacro -%}"
    "{%- macro tool_lines() -%}"
    "{%- if tools -%}"
    "{{- '<|tools|>\\n' -}}"
    "{%- for tool in tools -%}"
    "{{- tool | tojson(ensure_ascii=true, sort_keys=true, separators=(',', ':')) -}}"
    "{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- if messages[0].content -%}"
    "{{- '<|system|>\\n' + messages[0].content + '\\n' -}}"
    "{%- endif -%}"
    "{%- set rest = messages[1:] -%}"
    "{%- else -%}"
    "{%- set rest = messages -%}"
    "{%- endif -%}"
    "{{- tool_lines() -}}"
    "{%- for message in rest -%}"
    "{{- header(message.role, message.node) -}}"
    "{%- set content = message.content if message.content is string else '' -%}"
    "{%- if content or not message.tool_calls -%}"
    "{{- content + '\\n' -}}"
    "{%- endif -%}"
    "{%- for call in message.tool_calls or [] -%}"
    "{{- {'name': call.function.name, 'arguments': call.function.arguments}"
    " | tojson(ensure_ascii=true, separators=(',', ':')) + '\\n' -}}"
    "{%- endfor -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- header('assistant', node) -}}"
    "{%- endif -%}"
)

#: The template of a tokenizer without one: agentwarm's historic ``<|system|>`` format.
FALLBACK = ChatTemplate(FALLBACK_SOURCE, name="agentwarm-fallback")
