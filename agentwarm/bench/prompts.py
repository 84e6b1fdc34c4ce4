"""Generated prompt text of realistic length for the benchmark workload.

When no ``--system`` / ``--tools`` files are given, the benchmark's prompts come from here:
a shared policy, per-step instructions, tool schemas, users' opening messages and tool results.
The text is the project's own (sentences assembled from a fixed word list), deterministic in
``(seed, what it is for)``, and sized in tokens of the engine that will read it: every function
takes a target token count and a ``chars_per_token`` ratio measured on that engine's tokenizer
(:func:`chars_per_token`), so a "1,000-token policy" is about 1,000 tokens on any model.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

__all__ = (
    "chars_per_token",
    "instructions_text",
    "opening_text",
    "policy_text",
    "rng_for",
    "tool_result_text",
    "tool_schema",
)

_NOUNS = (
    "account", "address", "agent", "amount", "balance", "carrier", "catalog", "charge",
    "customer", "delivery", "discount", "exchange", "invoice", "item", "label", "ledger",
    "method", "note", "order", "package", "payment", "policy", "price", "product", "receipt",
    "record", "refund", "request", "return", "review", "shipment", "status", "stock", "ticket",
    "total", "variant", "warehouse", "warranty",
)  # fmt: skip
_VERBS = (
    "approve", "check", "collect", "confirm", "update", "explain", "list", "look up", "match",
    "note", "record", "review", "send", "summarize", "verify", "compare", "cancel", "apply",
)  # fmt: skip
_ADJS = (
    "active", "current", "delivered", "eligible", "exact", "final", "full", "matching", "new",
    "open", "original", "pending", "previous", "primary", "processed", "single", "valid",
)  # fmt: skip
_LINKS = ("before", "after", "unless", "when", "only if", "as soon as", "whenever")
_SUBJECTS = ("The agent", "You", "The assistant", "Each step", "The team")
_MODALS = ("must", "should", "may", "must not", "can")
_FIELDS = (
    "id", "status", "amount", "currency", "created", "updated", "name", "city", "zip",
    "quantity", "price", "sku", "method", "carrier", "tracking", "reason", "note", "level",
)  # fmt: skip


def rng_for(seed: int, *parts: object) -> random.Random:
    """A ``random.Random`` seeded from ``seed`` and ``parts`` (stable across processes)."""
    key = "\x1f".join(str(p) for p in (seed, *parts)).encode()
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))


def chars_per_token(encode: Callable[[str], list[int]], seed: int = 0) -> float:
    """Characters per token of ``encode`` on text of the kind this module generates."""
    sample = _prose(rng_for(seed, "calibrate"), 4000)
    return len(sample) / max(1, len(encode(sample)))


def _sentence(rng: random.Random) -> str:
    parts = [
        rng.choice(_SUBJECTS),
        rng.choice(_MODALS),
        rng.choice(_VERBS),
        "the",
        rng.choice(_ADJS),
        rng.choice(_NOUNS),
    ]
    if rng.random() < 0.6:
        parts += [rng.choice(_LINKS), "the", rng.choice(_NOUNS), "is", rng.choice(_ADJS)]
    if rng.random() < 0.3:
        parts += ["and", rng.choice(_VERBS), "its", rng.choice(_NOUNS)]
    return " ".join(parts) + "."


def _prose(rng: random.Random, chars: int) -> str:
    """Sentences up to about ``chars`` characters (the last one may be cut at a word)."""
    out: list[str] = []
    size = 0
    while size < chars:
        out.append(_sentence(rng))
        size += len(out[-1]) + 1
    return _cut(" ".join(out), chars)


def _cut(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    head = text[:chars]
    space = head.rfind(" ")
    return head[:space] if space > chars // 2 else head


def _sections(rng: random.Random, title: str, chars: int) -> str:
    """Markdown-ish sections of rules, about ``chars`` characters."""
    lines = [f"# {title}", ""]
    n = 0
    while sum(len(x) + 1 for x in lines) < chars:
        n += 1
        lines.append(f"## {n}. {rng.choice(_ADJS).capitalize()} {rng.choice(_NOUNS)}s")
        lines.append(_sentence(rng))
        lines += [f"- {_sentence(rng)}" for _ in range(rng.randint(2, 5))]
        lines.append("")
    return _cut("\n".join(lines).strip(), chars)


def _chars(tokens: int, cpt: float) -> int:
    return max(1, round(tokens * cpt))


def policy_text(seed: int, tokens: int, cpt: float) -> str:
    """The shared policy every node's system prompt starts with (about ``tokens`` tokens)."""
    return _sections(rng_for(seed, "policy"), "Service policy", _chars(tokens, cpt))


def instructions_text(seed: int, step: str, tokens: int, cpt: float) -> str:
    """Instructions of the subagent that performs ``step`` (about ``tokens`` tokens)."""
    rng = rng_for(seed, "instructions", step)
    head = f"You are the {step} specialist. Decide the arguments of {step} and call it."
    return head + "\n\n" + _sections(rng, f"Rules for {step}", _chars(tokens, cpt) - len(head))


def tool_schema(seed: int, step: str, tokens: int, cpt: float) -> dict[str, Any]:
    """An OpenAI-style function schema named ``step`` (about ``tokens`` tokens as JSON)."""
    rng = rng_for(seed, "tool", step)
    target = _chars(tokens, cpt)
    props: dict[str, Any] = {}
    schema: dict[str, Any] = {
        "type": "function",
        "function": {
            "name": step,
            "description": _prose(rng, max(40, target // 4)),
            "parameters": {"type": "object", "properties": props, "required": []},
        },
    }
    while len(json.dumps(schema)) < target:
        name = f"{rng.choice(_NOUNS).replace(' ', '_')}_{rng.choice(_FIELDS)}"
        if name in props:
            name = f"{name}_{len(props)}"
        props[name] = {"type": rng.choice(("string", "integer")), "description": _sentence(rng)}
        if rng.random() < 0.5:
            schema["function"]["parameters"]["required"].append(name)
    return schema


def opening_text(seed: int, episode: str, tokens: int, cpt: float) -> str:
    """The user's opening message of an episode (about ``tokens`` tokens)."""
    rng = rng_for(seed, "opening", episode)
    return (
        "Hello, I need help with my "
        + rng.choice(_NOUNS)
        + ". "
        + _prose(rng, _chars(tokens, cpt) - 32)
    )


def tool_result_text(
    seed: int, episode: str, index: int, step: str, tokens: int, cpt: float
) -> str:
    """A JSON tool result for call ``index`` of ``step`` in ``episode`` (about ``tokens``)."""
    rng = rng_for(seed, "result", episode, index, step)
    target = _chars(tokens, cpt)
    records: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"tool": step, "ok": True, "records": records}
    while len(json.dumps(doc, separators=(",", ":"))) < target:
        rec: dict[str, Any] = {"id": f"#{rng.randrange(10**6, 10**7)}"}
        for f in rng.sample(_FIELDS, 4):
            rec[f] = rng.choice((rng.choice(_ADJS), rng.randrange(1, 5000), rng.choice(_NOUNS)))
        records.append(rec)
    return json.dumps(doc, separators=(",", ":"))
