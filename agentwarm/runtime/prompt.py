"""Prefix-stable prompt rendering (DESIGN §3).

A node's prompt is ``[system][tools][transcript entries...][step text]``. Every segment is
tokenized on its own and the ids are concatenated, so no BPE merge crosses a segment boundary and
the ids of a prefix rendered while the previous step runs are an exact prefix of the real
request's ids. Encodings are cached: static segments per node, transcript entries per entry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentwarm._spec import NodeSpec
from agentwarm.engines.base import Engine
from agentwarm.runtime.transcript import Entry, Transcript, header

__all__ = ("PromptRenderer", "render_step_text", "render_system", "render_tools")


def render_system(system: str) -> str:
    return f"<|system|>\n{system}\n" if system else ""


def render_tools(tools: tuple[dict[str, object], ...]) -> str:
    if not tools:
        return ""
    lines = [json.dumps(t, sort_keys=True, separators=(",", ":")) for t in tools]
    return "<|tools|>\n" + "\n".join(lines) + "\n"


def render_step_text(text: str | None, node: str | None = None) -> list[str]:
    """Segments of a step's own part of the prompt: the text (as the transcript will record
    it) and the header of the reply the model is about to write."""
    segments = list(Entry("user", text, node).segments()) if text else []
    return [*segments, header("assistant", node)]


class PromptRenderer:
    """Renders node prompts to token ids for one engine and one transcript."""

    def __init__(self, engine: Engine, transcript: Transcript) -> None:
        self._engine = engine
        self._transcript = transcript
        self._static: dict[str, list[int]] = {}
        self._entry_ids: list[list[int]] = []

    def static_ids(self, spec: NodeSpec) -> list[int]:
        ids = self._static.get(spec.name)
        if ids is None:
            ids = []
            segments = (render_system(spec.system), render_tools(spec.tools))
            ids = self._encode([s for s in segments if s])
            self._static[spec.name] = ids
        return ids

    def transcript_ids(self, upto: int | None = None) -> list[int]:
        """Ids of the first ``upto`` transcript entries (all when ``None``)."""
        entries = self._transcript.entries
        n = len(entries) if upto is None else upto
        while len(self._entry_ids) < n:
            entry = entries[len(self._entry_ids)]
            self._entry_ids.append(self._encode(entry.segments()))
        out: list[int] = []
        for ids in self._entry_ids[:n]:
            out.extend(ids)
        return out

    def prefix_ids(self, spec: NodeSpec, upto: int | None = None) -> list[int]:
        """What is known of ``spec``'s next prompt now: static head + transcript so far."""
        return self.static_ids(spec) + self.transcript_ids(upto)

    def prompt_ids(self, spec: NodeSpec, text: str | None) -> list[int]:
        return self.prefix_ids(spec) + self._encode(render_step_text(text, spec.name))

    def _encode(self, segments: Sequence[str]) -> list[int]:
        ids: list[int] = []
        for segment in segments:
            ids.extend(self._engine.encode(segment))
        return ids
