"""The shared, append-only transcript of a workflow run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ("Entry", "Transcript", "header")


@dataclass(frozen=True, slots=True)
class Entry:
    """One transcript message. ``node`` is the step that added it."""

    role: str
    content: str
    node: str | None = None

    def segments(self) -> tuple[str, str]:
        """Header and body, tokenized separately: a prompt that ends with a header (the model
        is about to write the body) stays a prefix of the transcript once the body is added."""
        return header(self.role, self.node), f"{self.content}\n"

    def render(self) -> str:
        return "".join(self.segments())


def header(role: str, node: str | None = None) -> str:
    who = f" {node}" if node else ""
    return f"<|{role}{who}|>\n"


class Transcript:
    """Append-only list of :class:`Entry`; every node of a run sees the same transcript.

    Append-only is what keeps prompts prefix-stable: a prefix rendered earlier in the run stays
    a prefix of every later prompt.
    """

    def __init__(self) -> None:
        self._entries: list[Entry] = []

    def add(self, content: str, *, role: str = "user", node: str | None = None) -> Entry:
        entry = Entry(role=role, content=content, node=node)
        self._entries.append(entry)
        return entry

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __getitem__(self, index: int) -> Entry:
        return self._entries[index]

    def text(self) -> str:
        return "".join(e.render() for e in self._entries)
