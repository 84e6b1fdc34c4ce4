"""Prefix-stable prompt rendering (DESIGN §3).

A node's prompt is ``[system][tools][transcript entries...][step text]``. Every segment is
tokenized on its own and the ids are concatenated, so no BPE merge crosses a segment boundary and
the ids of a prefix rendered while the previous step runs are an exact prefix of the real
request's ids. Encodings are cached: static segments per node, transcript entries per entry.
"""

from __future__ import annotations

import json

from agentwarm.engines.base import Engine
from agentwarm.graphs._node import NodeSpec
from agentwarm.runtime.transcript import Transcript

__all__ = ("PromptRenderer", "render_step_text", "render_system", "render_tools")


def render_system(system: str) -> str:
    return f"<|system|>\n{system}\n" if system else ""


def render_tools(tools: tuple[dict[str, object], ...]) -> str:
    if not tools:
        return ""
    lines = [json.dumps(t, sort_keys=True, separators=(",", ":")) for t in tools]
    return "<|tools|>\n" + "\n".join(lines) + "\n"


def render_step_text(text: str | None) -> str:
    body = f"<|user|>\n{text}\n" if text else ""
    return body + "<|assistant|>\n"


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
            for segment in (render_system(spec.system), render_tools(spec.tools)):
                if segment:
                    ids.extend(self._engine.encode(segment))
            self._static[spec.name] = ids
        return ids

    def transcript_ids(self, upto: int | None = None) -> list[int]:
        """Ids of the first ``upto`` transcript entries (all when ``None``)."""
        entries = self._transcript.entries
        n = len(entries) if upto is None else upto
        while len(self._entry_ids) < n:
            entry = entries[len(self._entry_ids)]
            self._entry_ids.append(self._engine.encode(entry.render()))
        out: list[int] = []
        for ids in self._entry_ids[:n]:
            out.extend(ids)
        return out

    def prefix_ids(self, spec: NodeSpec, upto: int | None = None) -> list[int]:
        """What is known of ``spec``'s next prompt now: static head + transcript so far."""
        return self.static_ids(spec) + self.transcript_ids(upto)

    def prompt_ids(self, spec: NodeSpec, text: str | None) -> list[int]:
        return self.prefix_ids(spec) + self._engine.encode(render_step_text(text))
