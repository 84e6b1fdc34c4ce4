"""A model's chat template: OpenAI-style messages (+ tools) to the prompt text the model expects.

:class:`ChatTemplate` renders with transformers' own Jinja environment (the one
``tokenizer.apply_chat_template(..., tokenize=False)`` uses: sandboxed, ``trim_blocks``,
``lstrip_blocks``, its ``tojson``, ``raise_exception`` and ``strftime_now``), imported on the first
render so that importing agentwarm stays light. Before rendering, the string ``arguments`` of each
assistant tool call are parsed to JSON objects, as the OpenAI endpoints of vLLM and SGLang do:
templates format them with ``tojson``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from agentwarm._jsonfile import MAX_DEPTH, Flaw, find_flaw
from agentwarm.chat.toolcalls import family_of
from agentwarm.errors import ConfigError

__all__ = (
    "SYSTEM_ROLES",
    "ChatTemplate",
    "Message",
    "Tool",
    "check_tool_arguments",
    "openai_messages",
    "parse_arguments",
    "split_head",
)

#: One OpenAI-style chat message: ``{"role": "system"|"user"|"assistant"|"tool", "content": str,
#: "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}],
#: "tool_call_id": str, "name": str}``. Templates ignore keys they do not know (agentwarm's
#: fallback reads ``"node"``, the workflow node that added the message).
Message = dict[str, Any]
#: One tool schema, as given to ``apply_chat_template(tools=...)`` (OpenAI's
#: ``{"type": "function", "function": {...}}``).
Tool = Mapping[str, Any]

#: Markers in a template's source that tell its model family's tool-call format
#: (see :mod:`agentwarm.chat.toolcalls`), checked in this order.
_FAMILY_MARKERS = (
    ("mistral", "[TOOL_CALLS]"),
    ("hermes", "<tool_call>"),
    ("llama3", "<|start_header_id|>"),
)


#: Roles that make up a request's head when they lead its messages.
SYSTEM_ROLES = frozenset({"system", "developer"})


def split_head(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """(the leading run of system/developer messages, the rest): a request's *head* (what stays
    the same every time one agent role is called) and its conversation."""
    cut = 0
    while cut < len(messages):
        message = messages[cut]
        if not isinstance(message, Mapping) or message.get("role") not in SYSTEM_ROLES:
            break
        cut += 1
    return list(messages[:cut]), list(messages[cut:])


def openai_messages(messages: Iterable[Message]) -> list[Message]:
    """A copy of ``messages`` as the OpenAI endpoints of vLLM and SGLang hand it to a template:
    each assistant tool call's ``arguments``, when a JSON string, becomes the object it encodes
    (a string that is not JSON stays as it is: :func:`parse_arguments`)."""
    out = []
    for message in messages:
        message = dict(message)
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            message["tool_calls"] = [_with_parsed_arguments(call) for call in calls]
        out.append(message)
    return out


def _with_parsed_arguments(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        function["arguments"] = parse_arguments(arguments)
    return {**call, "function": function}


def parse_arguments(arguments: str) -> Any:
    """A tool call's ``arguments`` string as a template gets it: the JSON value it encodes,
    ``{}`` when blank, the string itself when it is not JSON. Raises ValueError when its JSON
    nests deeper than :data:`~agentwarm._jsonfile.MAX_DEPTH` levels."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except RecursionError:
        raise ValueError(Flaw("depth", (), MAX_DEPTH).problem()) from None
    except ValueError:
        return arguments
    if _brackets(arguments) > MAX_DEPTH:
        flaw = find_flaw(value, surrogates=False)
        if flaw is not None:
            raise ValueError(flaw.problem())
    return value


def _brackets(text: str) -> int:
    return text.count("[") + text.count("{")


def check_tool_arguments(messages: Sequence[Any]) -> None:
    """Raise ValueError naming ``messages[i].tool_calls[j].function.arguments`` of the first
    assistant tool call whose arguments :func:`parse_arguments` refuses (what a template would
    fail on); anything else about the messages is not checked here."""
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            continue
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, Mapping) else None
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            if not isinstance(arguments, str) or _brackets(arguments) <= MAX_DEPTH:
                continue  # fewer brackets than the limit cannot nest deeper: nothing to parse
            try:
                parse_arguments(arguments)
            except ValueError as exc:
                where = f"messages[{i}].tool_calls[{j}].function.arguments"
                raise ValueError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class ChatTemplate:
    """A Jinja chat template (a tokenizer's ``chat_template``) with the special-token strings it
    may refer to.

    ``name`` says which template it is (warnings name it; :func:`~agentwarm.chat.parse_tool_calls`
    and :attr:`family` read the model family from it when the source has no known marker).
    """

    source: str
    _: KW_ONLY
    name: str
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def from_file(
        cls, path: str | Path, *, name: str | None = None, bos_token: str = "", eos_token: str = ""
    ) -> ChatTemplate:
        """The template in file ``path`` (a ``.jinja`` file); ``name`` defaults to the file's
        stem."""
        where = Path(path)
        source = where.read_text(encoding="utf-8")
        return cls(source, name=name or where.stem, bos_token=bos_token, eos_token=eos_token)

    @property
    def family(self) -> str | None:
        """The tool-call format of the template's model family — ``"hermes"`` (Qwen2.5, Qwen3,
        Hermes: ``<tool_call>``), ``"llama3"`` or ``"mistral"`` — read from markers in the source,
        else from :attr:`name`; None when neither tells."""
        for family, marker in _FAMILY_MARKERS:
            if marker in self.source:
                return family
        return family_of(self.name)

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        add_generation_prompt: bool = True,
        **variables: Any,
    ) -> str:
        """The prompt text for ``messages`` and ``tools``, exactly as
        ``tokenizer.apply_chat_template(openai_messages(messages), tools=tools or None,
        add_generation_prompt=..., tokenize=False, **variables)`` renders it with this template
        and these special tokens. No tools (``None`` or empty) is passed as ``None``.
        ``variables`` are extra template variables (``date_string``, ``enable_thinking``, ...).

        Raises :class:`~agentwarm.errors.ConfigError` when the template cannot render these
        messages (it raised, or the source is not valid Jinja).
        """
        from jinja2.exceptions import TemplateError
        from transformers.utils.chat_template_utils import render_jinja_template

        context = {"bos_token": self.bos_token, "eos_token": self.eos_token, **variables}
        try:
            # annotated ``-> str``, it returns (renderings, generation indices)
            rendered: Any = render_jinja_template(
                conversations=[openai_messages(messages)],
                tools=[dict(t) for t in tools] if tools else None,
                chat_template=self.source,
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        except (TemplateError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"chat template {self.name!r} cannot render these messages: {exc}"
            ) from exc
        return str(rendered[0][0])

    def __repr__(self) -> str:
        return f"ChatTemplate(name={self.name!r}, {len(self.source)} chars)"
