"""Chat templates: OpenAI-style messages to the prompt a model was trained on, and back.

- :class:`ChatTemplate` renders messages and tools exactly as ``apply_chat_template`` does;
  :data:`FALLBACK` is agentwarm's own format for a tokenizer without a template;
  :data:`QWEN2_5` is Qwen2.5-Instruct's template (the embedded presets' tokenizer family).
- :func:`render_ids` tokenizes a rendering message by message, so that the ids of a conversation's
  stable prefix are a token-exact prefix of the ids of the whole prompt (what prefetching needs).
- :func:`parse_tool_calls` reads the tool calls out of a reply for a few model families;
  :func:`check_tool_arguments` refuses the request's tool-call arguments no template can format
  (JSON nested too deeply).

The ground floor of the package: this imports nothing else of agentwarm but
:mod:`agentwarm.errors` and :mod:`agentwarm._jsonfile`; transformers' Jinja environment is
imported on the first render.
"""

from __future__ import annotations

from importlib.resources import files

from agentwarm.chat.fallback import FALLBACK
from agentwarm.chat.render import PrefixUnstableWarning, RenderedPrompt, render_ids
from agentwarm.chat.template import (
    SYSTEM_ROLES,
    ChatTemplate,
    Message,
    Tool,
    check_tool_arguments,
    openai_messages,
    parse_arguments,
    split_head,
)
from agentwarm.chat.toolcalls import family_of, parse_tool_calls, split_tool_calls

__all__ = (
    "FALLBACK",
    "QWEN2_5",
    "SYSTEM_ROLES",
    "ChatTemplate",
    "Message",
    "PrefixUnstableWarning",
    "RenderedPrompt",
    "Tool",
    "check_tool_arguments",
    "family_of",
    "openai_messages",
    "parse_arguments",
    "parse_tool_calls",
    "render_ids",
    "split_head",
    "split_tool_calls",
)

#: Qwen2.5-Instruct's chat template (Apache-2.0, see ``templates/NOTICE.md``): ChatML with
#: ``<tool_call>`` tools; its special tokens are ``<|im_start|>``/``<|im_end|>``, no BOS.
QWEN2_5 = ChatTemplate(
    files("agentwarm.chat").joinpath("templates/qwen2_5.jinja").read_text(encoding="utf-8"),
    name="qwen2.5",
    eos_token="<|im_end|>",
)
