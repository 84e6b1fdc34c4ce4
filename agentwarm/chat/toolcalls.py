"""The tool calls in a model's reply, for a small documented set of model families.

=============  ========================================================================
family         what the model writes
=============  ========================================================================
``hermes``     ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per
               call (Qwen2.5, Qwen3, NousResearch Hermes 2/3, other ChatML tool models)
``llama3``     ``{"name": ..., "parameters": {...}}`` as the whole reply, optionally after
               ``<|python_tag|>``; several separated by ``;`` (Llama 3.1/3.2/3.3 JSON tools)
``mistral``    ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (Mistral v3 and
               later); also the bare list, as decoding drops the special ``[TOOL_CALLS]``
=============  ========================================================================

A template's family comes from its name (:func:`family_of`: ``qwen``/``hermes``, ``llama``,
``mistral`` anywhere in it) or from its source (:attr:`ChatTemplate.family`). Other families,
and replies that do not parse, give no tool calls. Calls come back in OpenAI's form,
``{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}``, with an ``id``
of 9 letters and digits derived from the reply (Mistral's templates want exactly 9), so the same
reply always gives the same ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

__all__ = ("family_of", "parse_tool_calls", "split_tool_calls")

_FAMILIES = (("hermes", ("hermes", "qwen")), ("llama3", ("llama",)), ("mistral", ("mistral",)))
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_DECODER = json.JSONDecoder()


def family_of(template_name: str) -> str | None:
    """The tool-call family named by ``template_name`` (a family name itself, or a template or
    model name that contains ``qwen``, ``hermes``, ``llama`` or ``mistral``), else None."""
    lowered = template_name.lower()
    for family, words in _FAMILIES:
        if lowered == family or any(word in lowered for word in words):
            return family
    return None


def parse_tool_calls(text: str, template_name: str) -> list[dict[str, Any]]:
    """The tool calls in the reply ``text`` of a model whose template is ``template_name`` (or a
    family name), in OpenAI's form; ``[]`` when there are none or the family is not known."""
    return split_tool_calls(text, template_name)[1]


def split_tool_calls(text: str, template_name: str) -> tuple[str, list[dict[str, Any]]]:
    """``text`` without its tool calls (what an OpenAI endpoint returns as ``content``), and the
    tool calls (as :func:`parse_tool_calls`). Text with no parsed call comes back whole."""
    family = family_of(template_name)
    if family == "hermes":
        found = _hermes(text)
    elif family == "llama3":
        found = _llama3(text)
    elif family == "mistral":
        found = _mistral(text)
    else:
        found = None
    if not found:
        return text, []
    content, calls = found
    return content, [_openai(text, i, name, args) for i, (name, args) in enumerate(calls)]


Calls = list[tuple[str, Any]]


def _hermes(text: str) -> tuple[str, Calls] | None:
    calls: Calls = []
    for block in _HERMES_BLOCK.finditer(text):
        call = _call(_json(block.group(1).strip()), "arguments")
        if call is not None:
            calls.append(call)
    if not calls:
        return None
    return _HERMES_BLOCK.sub("", text).strip(), calls


def _llama3(text: str) -> tuple[str, Calls] | None:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    calls: Calls = []
    at = 0
    while at < len(body):
        try:
            value, at = _DECODER.raw_decode(body, at)
        except ValueError:
            return None
        call = _call(value, "parameters") or _call(value, "arguments")
        if call is None:
            return None
        calls.append(call)
        while at < len(body) and (body[at].isspace() or body[at] == ";"):
            at += 1
    return ("", calls) if calls else None


def _mistral(text: str) -> tuple[str, Calls] | None:
    content, marker, rest = text.partition("[TOOL_CALLS]")
    if not marker:
        content, rest = "", text
        if not text.lstrip().startswith("[{"):
            return None
    try:
        value, _ = _DECODER.raw_decode(rest.strip())
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, "arguments") for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return content.strip(), [c for c in calls if c is not None]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _call(value: Any, key: str) -> tuple[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or key not in value:
        return None
    return value["name"], value[key]


def _openai(text: str, index: int, name: str, arguments: Any) -> dict[str, Any]:
    digest = hashlib.sha256(f"{index}:{text}".encode()).hexdigest()[:9]
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": digest, "type": "function", "function": {"name": name, "arguments": arguments}}
