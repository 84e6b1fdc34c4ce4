"""``stored_prefix`` and ``read`` against a model: the set of stored block prefixes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engines.kvtier.helpers import BLOCK, open_tier, prefix_kv

NAMESPACES = ("", "tenant-a")
tokens = st.lists(st.integers(0, 2), max_size=14)


def expected_prefix(
    model: set[tuple[str, tuple[int, ...]]], ns: str, ids: list[int], start: int
) -> int:
    end = start // BLOCK
    while end < len(ids) // BLOCK and (ns, tuple(ids[: (end + 1) * BLOCK])) in model:
        end += 1
    return end * BLOCK


@settings(max_examples=25, deadline=None)
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(NAMESPACES), tokens, st.integers(0, 3)), min_size=1, max_size=6
    ),
    data=st.data(),
)
def test_stored_prefix_and_read_agree_with_a_model_of_stored_blocks(
    writes: list[tuple[str, list[int], int]], data: st.DataObject
) -> None:
    model: set[tuple[str, tuple[int, ...]]] = set()
    with tempfile.TemporaryDirectory() as where, open_tier(Path(where)) as tier:
        for ns, ids, start_block in writes:
            start = min(start_block, len(ids) // BLOCK) * BLOCK
            tier.write(ns, ids, prefix_kv(ns, ids, start), start)
            model.update(
                (ns, tuple(ids[: (b + 1) * BLOCK]))
                for b in range(start // BLOCK, len(ids) // BLOCK)
            )
        tier.flush()
        assert tier.stats().stored_blocks == len(model)
        for _ in range(6):
            ns = data.draw(st.sampled_from(NAMESPACES))
            base = data.draw(st.sampled_from([ids for _, ids, _ in writes]))
            cut = data.draw(st.integers(0, len(base)))
            ids = base[:cut] + data.draw(tokens)
            start = data.draw(st.integers(0, len(ids) + BLOCK))
            found = tier.stored_prefix(ns, ids, start)
            assert found == expected_prefix(model, ns, ids, start)
            first = start // BLOCK * BLOCK
            assert found <= first or found % BLOCK == 0
            if found > first:
                kv = tier.read(ns, ids, first, found)
                assert kv is not None
                assert torch.equal(kv, prefix_kv(ns, ids[:found])[:, :, :, first:])


def test_a_write_from_a_later_block_is_found_from_there_only(tmp_path: Path) -> None:
    ids = list(range(12))
    with open_tier(tmp_path) as tier:
        tier.write("", ids, prefix_kv("", ids, 4), 4)
        tier.flush()
        assert tier.stored_prefix("", ids) == 0
        assert tier.stored_prefix("", ids, 4) == 12
        assert tier.stored_prefix("", ids, 6) == 12  # the block holding 6 begins at 4
        assert tier.stored_prefix("", ids, 12) == 12  # no whole block from 12: <= start
        assert tier.stored_prefix("", ids[:10], 4) == 8  # a trailing partial block is no block
        assert tier.stored_prefix("", [99, *ids[1:]], 4) == 4  # another prefix: other keys
