"""The hash chain of block keys and the directory names (no file I/O)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentwarm.engines.kvtier.keys import (
    KEY_CHARS,
    block_keys,
    fingerprint_dir,
    is_block_name,
    is_namespace_dir,
    namespace_dir,
)

ids_lists = st.lists(st.integers(0, 2), max_size=20)


@given(ids_lists, ids_lists, st.integers(1, 5))
def test_two_sequences_share_block_keys_exactly_as_far_as_they_share_whole_blocks(
    a: list[int], b: list[int], size: int
) -> None:
    keys_a, keys_b = block_keys(a, size), block_keys(b, size)
    assert len(keys_a) == len(a) // size
    for i in range(min(len(keys_a), len(keys_b))):
        same_prefix = a[: (i + 1) * size] == b[: (i + 1) * size]
        assert (keys_a[i] == keys_b[i]) == same_prefix


@given(ids_lists, st.integers(1, 5), st.integers(0, 6))
def test_the_keys_of_a_prefix_are_a_prefix_of_the_keys(ids: list[int], size: int, n: int) -> None:
    keys = block_keys(ids, size)
    assert block_keys(ids[: n * size], size) == keys[:n]
    assert block_keys(ids, size, n) == keys[:n]
    assert all(re.fullmatch(f"[0-9a-f]{{{KEY_CHARS}}}", key) for key in keys)
    assert all(is_block_name(f"{key}.kv") for key in keys)


def test_a_key_is_fixed_by_the_format() -> None:
    # pinned: a change of the chain would orphan every stored file (bump the person string)
    assert block_keys([1, 2, 3, 4], 4) == ["2262ce7a68f4ab1c7189d6e6386add42"]
    assert block_keys([1, 2, 3], 4) == []


def test_namespace_dirs_are_digests_never_the_name() -> None:
    assert namespace_dir("") == "default"
    tenant = namespace_dir("acme-corp")
    assert re.fullmatch("ns-[0-9a-f]{32}", tenant) and "acme" not in tenant
    assert namespace_dir("acme-corp") == tenant != namespace_dir("acme-corp2")
    assert is_namespace_dir(tenant) and is_namespace_dir("default")
    assert not is_namespace_dir("acme-corp") and not is_namespace_dir("ns-../x")


def test_fingerprint_dirs_differ_by_fingerprint_and_block_size() -> None:
    a = fingerprint_dir("model-a", 64)
    assert re.fullmatch("fp-[0-9a-f]{32}-b64", a)
    assert a != fingerprint_dir("model-b", 64)
    assert a != fingerprint_dir("model-a", 32)
    assert "/" not in fingerprint_dir("../../etc", 64)
