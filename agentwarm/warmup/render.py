"""A chat prompt as the token ids a model's server will see: the model's chat template and
tokenizer, rendered per stable message boundary (:func:`~agentwarm.chat.render_ids`).

Shared by the warm-ups (a plan's ``messages`` + ``tools`` prefix) and the gateway (a node's head
+ its expected conversation): only the messages that render the same whatever follows them are
kept, so the ids are a token-exact prefix of any real request that starts with those messages.

A renderer knows the model's context (``max_context``: the engine's, a preset's
:data:`~agentwarm.engines.tokenizers.PRESET_CONTEXT`, a checkpoint's ``max_position_embeddings``;
``None`` when unknown), for callers that refuse what cannot fit before rendering it. The encodings
it keeps across calls are bounded by tokens and characters
(:class:`~agentwarm.chat.memo.PieceCache`), not by their number.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentwarm.chat import FALLBACK, ChatTemplate, Message, render_ids
from agentwarm.chat.memo import PieceCache
from agentwarm.engines.base import Engine
from agentwarm.engines.tokenizers import Tokenizer, chat_template_of, load_tokenizer
from agentwarm.errors import ConfigError

__all__ = ("ChatRenderer", "load_chat_renderer")

#: A message that follows a prefix, for the stability check of the prefix's last message.
_NEXT: tuple[Message, ...] = ({"role": "user", "content": ""},)


class ChatRenderer:
    """Messages (+ tools) as token ids, rendered with ``template`` and tokenized with ``encode``
    (those of the model the server serves: a tokenizer's or an engine's ``encode``, which never
    adds special tokens); ``max_context`` is that model's context in tokens (None: unknown)."""

    def __init__(
        self,
        encode: Callable[[str], list[int]],
        template: ChatTemplate,
        *,
        tokenizer: Tokenizer | None = None,
        max_context: int | None = None,
    ) -> None:
        self.encode = encode
        self.template = template
        #: The tokenizer ``encode`` belongs to, when the renderer was loaded from one.
        self.tokenizer = tokenizer
        self.max_context = max_context
        self._pieces = PieceCache()

    @classmethod
    def for_engine(cls, engine: Engine) -> ChatRenderer:
        """The renderer of what ``engine`` serves: its ``encode`` and chat template (the
        fallback format when it has none), and its ``max_context`` when it has one."""
        context = getattr(engine, "max_context", None)
        context = context if isinstance(context, int) and context > 0 else None
        return cls(engine.encode, engine.chat_template or FALLBACK, max_context=context)

    def prefix_ids(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """The ids every real request that starts with ``messages`` (and has ``tools``) starts
        with: its stable messages (``[]`` when nothing renders)."""
        if not messages:
            return []
        try:
            rendered = render_ids(
                self.template,
                self.encode,
                list(messages),
                tools=[dict(t) for t in tools] if tools else None,
                add_generation_prompt=False,
                then=_NEXT,
                cache=self._pieces,
            )
        except ConfigError:  # e.g. a template that wants a user turn first: nothing known
            return []
        return rendered.prefix_ids


def load_chat_renderer(model: str) -> ChatRenderer:
    """The renderer of ``--model``: a preset name (its built-in tokenizer and template) or a
    local checkpoint/tokenizer directory (its tokenizer and chat template). Raises
    :class:`~agentwarm.errors.ConfigError` naming the fix when neither works."""
    from agentwarm.engines.built import resolve_model
    from agentwarm.engines.tokenizers import PRESET_CONTEXT, PRESET_TOKENIZERS

    model = resolve_model(model)  # smollm2: the directory scripts/setup_vllm.sh built
    spec: str | Path = PRESET_TOKENIZERS.get(model, model)
    if spec == model and not Path(model).is_dir():
        raise ConfigError(
            f"--model {model!r} is neither a preset ({', '.join(PRESET_TOKENIZERS)}) nor a "
            "directory holding the served model's tokenizer: pass the model the server serves"
        )
    try:
        tokenizer = load_tokenizer(spec)
    except Exception as exc:  # EngineError and whatever transformers raises
        raise ConfigError(f"--model {model!r}: cannot load its tokenizer ({exc})") from exc
    assert tokenizer is not None
    template = chat_template_of(tokenizer, name=Path(model).name) or FALLBACK
    context = PRESET_CONTEXT if model in PRESET_TOKENIZERS else _checkpoint_context(Path(model))
    return ChatRenderer(tokenizer.encode, template, tokenizer=tokenizer, max_context=context)


def _checkpoint_context(folder: Path) -> int | None:
    """``max_position_embeddings`` of the checkpoint's ``config.json`` (None without one)."""
    try:
        value = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        context = value.get("max_position_embeddings") if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None
    return context if isinstance(context, int) and context > 0 else None
