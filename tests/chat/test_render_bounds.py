"""How much work one conversation may cost :func:`~agentwarm.chat.render_ids`: a bounded number
of prefix renderings (not one per message), fewer still once the conversation is known; and how
much the encodings kept across calls may hold (:class:`~agentwarm.chat.memo.PieceCache`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentwarm.chat import QWEN2_5, ChatTemplate, Message, render_ids
from agentwarm.chat.memo import PieceCache
from agentwarm.chat.render import MAX_PREFIX_RENDERS
from agentwarm.engines.tokenizers import QwenTokenizer
from agentwarm.warmup.render import ChatRenderer

ENCODE = QwenTokenizer().encode


class Counting(ChatTemplate):
    """Qwen2.5's template, counting its renderings (and the messages they held)."""

    calls: list[int]

    def render(self, messages: Sequence[Message], **options: Any) -> str:
        self.calls.append(len(messages))
        return super().render(messages, **options)


def counting(name: str) -> Counting:
    template = Counting(QWEN2_5.source, name=name, eos_token=QWEN2_5.eos_token)
    object.__setattr__(template, "calls", [])
    return template


def chat(n: int, tag: str) -> list[Message]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"{tag} {i}"} for i in range(n)]


def test_a_long_conversation_renders_a_bounded_number_of_prefixes() -> None:
    assert MAX_PREFIX_RENDERS == 16
    template = counting("qwen2.5-counted")
    messages = chat(200, "long")
    rendered = render_ids(template, ENCODE, messages)
    # The whole prompt, then every 16th prefix (200 / 16 = 12.5 of them: 16, 32, ..., 192)
    # and the last one: 14 renderings, not the 201 of one per message.
    assert template.calls == [200, *range(16, 193, 16), 200]
    assert rendered.text == QWEN2_5.render(messages)
    assert rendered.ids == ENCODE(rendered.text)
    assert rendered.stable == 200
    assert rendered.prefix_ids == ENCODE(QWEN2_5.render(messages, add_generation_prompt=False))
    # the boundaries that were not rendered hold the one before them
    assert rendered.boundaries[17] == rendered.boundaries[16] < rendered.boundaries[32]

    # The conversation goes on: only the new prefix is rendered (the others are known).
    template.calls.clear()
    longer = [*messages, {"role": "user", "content": "long 200"}]
    again = render_ids(template, ENCODE, longer)
    assert template.calls == [201, 201]
    assert again.ids == ENCODE(QWEN2_5.render(longer))
    assert again.stable == 201


def test_a_short_conversation_is_still_checked_message_by_message() -> None:
    template = counting("qwen2.5-short")
    messages = chat(MAX_PREFIX_RENDERS, "short")
    render_ids(template, ENCODE, messages)
    assert template.calls == [16, *range(1, 17)]


def test_the_piece_cache_stays_within_its_token_and_character_bounds() -> None:
    cache = PieceCache(max_tokens=1000, max_chars=6000)
    for i in range(5):  # huge and distinct: none is kept
        huge = [{"role": "user", "content": f"{i} " + "word " * 5000}]
        render_ids(QWEN2_5, ENCODE, huge, cache=cache)
        assert cache.tokens <= 1000 and cache.chars <= 6000
    assert list(cache) == ["<|im_start|>assistant\n"]  # the generation prompt alone
    assert cache.tokens == sum(len(ids) for ids in cache.values())
    assert cache.chars == sum(len(piece) for piece in cache)
    for i in range(200):  # many small distinct ones: the oldest go
        render_ids(QWEN2_5, ENCODE, [{"role": "user", "content": f"small {i} " * 20}], cache=cache)
        assert cache.tokens <= 1000 and cache.chars <= 6000
    assert cache.tokens == sum(len(ids) for ids in cache.values()) > 900


def test_a_renderer_keeps_few_ids_of_huge_distinct_messages() -> None:
    renderer = ChatRenderer(ENCODE, QWEN2_5)
    for i in range(8):  # ~150,000 tokens each: 1.2 M ids if kept
        renderer.prefix_ids([{"role": "user", "content": f"{i} " + "word " * 150_000}])
    kept = sum(len(ids) for ids in renderer._pieces.values())
    assert kept < 1000  # none of them: each is over an eighth of the cache's token bound
