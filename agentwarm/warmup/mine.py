"""Mining a warm-up plan from traffic: the prefixes most requests start with
(``agentwarm warmup plan``).

Chat requests (read by :mod:`agentwarm.warmup.sources`) are grouped by their *head* (their
leading system/developer messages and their tools). In each group a trie over the rest of the
messages (one edge per message, told apart by its canonical JSON) counts how many requests
start with each prefix. Kept, per group:

* the deepest prefixes whose *share* (requests starting with it / all requests mined, every
  group and file together) is at least ``min_share`` and that at least two *conversations*
  share: a prefix whose requests branch into several children of that share gives each child
  (or its own deepest descendants), not itself;
* the head itself, when its share is at least ``min_share`` and it is not one of those.

A conversation is a chain of requests each of which extends the one before (one session's
requests): the requests that end at the trie's leaves count them, identical requests as so
many conversations. Its own history is shared by all of its requests, so a
share of requests alone would keep every long conversation's history; but it is cached by the
conversation's own first requests and is worth nothing to the next one, so a prefix deeper than
the head is kept only when two conversations or more go through it.

Token-id requests: the same over token ids, by one pass over the sorted id lists (the longest
prefixes that two conversations or more share and at least ``min_share`` of the requests start
with, a prefix of another kept one dropped).

A prefix's ``tokens`` is its length rendered for the served model
(:meth:`~agentwarm.warmup.render.ChatRenderer.prefix_ids`; for ids, their number); prefixes of
no token are dropped. The plan is ordered by value (share x tokens) high to low, ties by tokens
then by the prefix's canonical JSON, and cut to ``top_k``: the same inputs, in any order, give
the same plan.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentwarm.chat import Message, split_head
from agentwarm.engines.radix.node import common_len
from agentwarm.errors import ConfigError
from agentwarm.warmup.render import ChatRenderer, load_chat_renderer
from agentwarm.warmup.sources import ChatRecord, Records, read_sources
from agentwarm.warmup.types import Plan, WarmPrefix

__all__ = ("Mined", "mine", "mine_plan")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _raw(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class _Node:
    """A trie node: the prefix ending with ``message``, ``count`` requests starting with it."""

    message: Message | None = None
    count: int = 0
    #: Requests that end with this prefix's last message.
    ends: int = 0
    #: Conversations through this prefix (set by :func:`_count_leaves`): the requests ending at
    #: the leaves below it (identical requests are as many conversations).
    leaves: int = 0
    nodes: Counter[str] = field(default_factory=Counter)
    children: dict[str, _Node] = field(default_factory=dict)


@dataclass(slots=True)
class _Group:
    """The requests of one head."""

    system: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    root: _Node = field(default_factory=_Node)


@dataclass(frozen=True, slots=True)
class Mined:
    """A mined plan and what it was mined from."""

    plan: Plan
    requests: int

    @property
    def tokens(self) -> int:
        """The plan's tokens (its prefixes' lengths summed)."""
        return sum(p.tokens for p in self.plan.prefixes)


def _least_count(total: int, min_share: float) -> int:
    """The fewest requests (>= 1) whose share of ``total`` is at least ``min_share``."""
    least = max(1, math.ceil(min_share * total))
    while least > 1 and (least - 1) / total >= min_share:
        least -= 1
    while least / total < min_share:
        least += 1
    return least


def _groups(chats: Sequence[ChatRecord]) -> list[_Group]:
    """The tries of ``chats``, one per head; records taken in a canonical order, so that a
    prefix's messages are those of its first request in that order, whatever the input's."""
    groups: dict[str, _Group] = {}
    for record in sorted(chats, key=lambda r: (_raw([r.messages, r.tools]), r.node or "")):
        cut = len(split_head(record.messages)[0])
        system = record.messages[:cut]
        key = _canonical([system, record.tools])
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(system, record.tools)
        node = group.root
        node.count += record.count
        if record.node is not None:
            node.nodes[record.node] += record.count
        for message in record.messages[cut:]:
            edge = _canonical(message)
            child = node.children.get(edge)
            if child is None:
                child = node.children[edge] = _Node(message)
            node = child
            node.count += record.count
            if record.node is not None:
                node.nodes[record.node] += record.count
        node.ends += record.count
    return [groups[k] for k in sorted(groups)]


def _count_leaves(root: _Node) -> None:
    """Set ``leaves`` of every node under ``root`` (iteratively: conversations can be long)."""
    order: list[_Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    for node in reversed(order):
        node.leaves = sum(c.leaves for c in node.children.values()) if node.children else node.ends


def _node_name(node: _Node) -> str | None:
    if not node.nodes:
        return None
    return min(node.nodes.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _chat_prefixes(group: _Group, least: int) -> list[tuple[tuple[Message, ...], _Node]]:
    """The kept prefixes of one group (see the module docstring), with their trie nodes."""
    root = group.root
    if root.count < least:
        return []
    _count_leaves(root)
    kept: list[tuple[tuple[Message, ...], _Node]] = []
    stack: list[tuple[tuple[Message, ...], _Node]] = [(group.system, root)]
    while stack:
        messages, node = stack.pop()
        frequent = [c for c in node.children.values() if c.count >= least and c.leaves >= 2]
        if not frequent:
            kept.append((messages, node))
        for child in frequent:
            assert child.message is not None
            stack.append(((*messages, child.message), child))
    if not any(node is root for _, node in kept):
        kept.append((group.system, root))
    return kept


def _id_prefixes(ids: Sequence[tuple[int, ...]], least: int) -> list[tuple[tuple[int, ...], int]]:
    """The longest id prefixes that two conversations or more share and at least ``least`` of
    ``ids`` start with, none a prefix of another, each with how many start with it."""
    seqs = sorted(ids)
    n = len(seqs)
    if n < least:
        return []
    # The conversations' last requests: those no other request extends (in sorted order, a
    # sequence another extends is extended by the one after it).
    ends = [a for a, b in itertools.pairwise([*seqs, ()]) if a == b or b[: len(a)] != a]
    # Every prefix two conversations share ends where two neighbours' shared part ends.
    candidates = {a[: common_len(a, b, 0)] for a, b in itertools.pairwise(ends)}
    counted = []
    for prefix in candidates:
        if not prefix:
            continue
        start = bisect.bisect_left(seqs, prefix)
        end = start
        while end < n and seqs[end][: len(prefix)] == prefix:
            end += 1
        if end - start >= least:
            counted.append((prefix, end - start))
    counted.sort()
    return [
        (prefix, count)
        for i, (prefix, count) in enumerate(counted)
        if not any(longer[: len(prefix)] == prefix for longer, _ in counted[i + 1 :])
    ]


def _order_key(prefix: WarmPrefix) -> tuple[float, int, str]:
    return (-prefix.value, -prefix.tokens, _canonical(prefix.to_json()))


def mine_records(
    records: Records,
    *,
    renderer: ChatRenderer | None,
    top_k: int = 20,
    min_share: float = 0.01,
) -> Plan:
    """The plan of ``records`` (see the module docstring); ``renderer`` ``None``: the ``tiny``
    preset's."""
    total = records.total
    if total == 0:
        return Plan()
    least = _least_count(total, min_share)
    prefixes: list[WarmPrefix] = []
    for group in _groups(records.chats):
        for messages, node in _chat_prefixes(group, least):
            if not messages:
                continue
            if renderer is None:
                renderer = load_chat_renderer("tiny")
            tokens = len(renderer.prefix_ids(list(messages), list(group.tools) or None))
            if tokens:
                prefixes.append(
                    WarmPrefix(
                        messages=messages,
                        tools=group.tools or None,
                        share=node.count / total,
                        tokens=tokens,
                        count=node.count,
                        node=_node_name(node),
                    )
                )
    for ids, count in _id_prefixes(records.ids, least):
        prefixes.append(
            WarmPrefix(input_ids=ids, share=count / total, tokens=len(ids), count=count)
        )
    prefixes.sort(key=_order_key)
    return Plan(tuple(prefixes[:top_k]))


def mine(
    paths: Sequence[Path],
    *,
    renderer: ChatRenderer | None,
    top_k: int = 20,
    min_share: float = 0.01,
    since_s: float | None = None,
    state_dir: Path | None = None,
    workflow: Path | None = None,
) -> Mined:
    """:func:`mine_plan`, with how many requests it read."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"--top-k must be a positive integer, got {top_k!r}")
    if not (0.0 < min_share <= 1.0):
        raise ConfigError(f"--min-share must be in (0, 1], got {min_share!r} (e.g. 0.01: 1%)")
    if since_s is not None and not (since_s > 0):
        raise ConfigError(f"--since-hours must be > 0, got {since_s / 3600!r}")
    records = read_sources(paths, since_s=since_s, state_dir=state_dir, workflow=workflow)
    if records.total == 0:
        window = "" if since_s is None else f" from the last {since_s / 3600:g} hours"
        raise ConfigError(
            f"nothing to mine: {', '.join(map(str, paths))} hold no requests{window}; "
            "give request logs or traces with their steps"
            + ("" if since_s is None else ", or a longer --since-hours")
        )
    plan = mine_records(records, renderer=renderer, top_k=top_k, min_share=min_share)
    return Mined(plan, records.total)


def mine_plan(
    paths: Sequence[Path],
    *,
    renderer: ChatRenderer | None,
    top_k: int = 20,
    min_share: float = 0.01,
    since_s: float | None = None,
    state_dir: Path | None = None,
    workflow: Path | None = None,
) -> Plan:
    """The warm-up plan mined from ``paths`` (request logs and agentwarm traces, see
    :mod:`agentwarm.warmup.sources`): the ``top_k`` most valuable prefixes that at least
    ``min_share`` of the requests start with (see the module docstring). ``renderer`` gives
    chat prefixes' token lengths (``None``: the ``tiny`` preset's); ``since_s`` keeps the
    records of the last ``since_s`` seconds; traces need their nodes' heads from ``state_dir``
    (a gateway's) or ``workflow`` (the file that ran). Raises
    :class:`~agentwarm.errors.ConfigError` naming the file, line and fix of unusable input."""
    return mine(
        paths,
        renderer=renderer,
        top_k=top_k,
        min_share=min_share,
        since_s=since_s,
        state_dir=state_dir,
        workflow=workflow,
    ).plan
