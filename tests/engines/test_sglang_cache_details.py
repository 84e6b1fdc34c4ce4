"""``meta_info.cached_tokens_details`` (SGLang HiCache's split of cached tokens by tier) and an
engine's ``cached_tokens_by_source``: written by ``agentwarm serve`` (its disk tier as SGLang's
``storage``), read by the SGLang client into ``Completion``/``PrefillResult``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentwarm.engines.base import PrefillStatus
from agentwarm.engines.sglang.cache_details import (
    STORAGE_BACKEND,
    cached_tokens_by_source,
    cached_tokens_details,
)
from agentwarm.engines.sglang.metrics import ClientCounters
from agentwarm.engines.sglang.protocol import MetaInfo


def test_the_disk_tier_is_sglangs_storage_tier() -> None:
    assert cached_tokens_details({"device": 64, "disk": 512}) == {
        "device": 64,
        "host": 0,
        "storage": 512,
        "storage_backend": STORAGE_BACKEND,
    }
    assert cached_tokens_details({"device": 64}) == {"device": 64, "host": 0}


def test_no_details_when_nothing_was_cached_as_sglang_answers() -> None:
    assert cached_tokens_details({}) is None
    assert cached_tokens_details({"device": 0, "disk": 0}) is None


def test_sglang_hicache_replies_read_as_sources() -> None:
    hicache = MetaInfo(cached_tokens=2, cached_tokens_details={"device": 2, "host": 0})
    assert cached_tokens_by_source(hicache) == {"device": 2, "host": 0}
    l3 = {"device": 1, "host": 2, "storage": 3, "storage_backend": "HiCacheFile"}
    assert cached_tokens_by_source({"cached_tokens_details": l3}) == {
        "device": 1,
        "host": 2,
        "disk": 3,
    }
    for meta in ({}, {"cached_tokens_details": None}, {"cached_tokens_details": [1]}):
        assert cached_tokens_by_source(meta) == {}
    odd = {"device": "2", "host": -1, "storage": True}  # not counts: left out, never guessed
    assert cached_tokens_by_source({"cached_tokens_details": odd}) == {}


@given(st.dictionaries(st.sampled_from(["device", "host", "disk"]), st.integers(0, 10**6)))
def test_the_split_survives_the_wire(by_source: dict[str, int]) -> None:
    details = cached_tokens_details(by_source)
    back = cached_tokens_by_source({"cached_tokens_details": details})
    if not any(by_source.values()):
        assert back == {}
    else:
        assert back == {"device": 0, "host": 0, **by_source}


def test_the_client_puts_the_split_on_its_results() -> None:
    counters = ClientCounters()
    meta = MetaInfo(
        prompt_tokens=600,
        cached_tokens=576,
        cached_tokens_details=cached_tokens_details({"device": 0, "disk": 576}),
        finish_reason={"type": "length", "length": 1},
    )
    completion = counters.completion("r", [1] * 600, meta, [7], "x", 0.1, 0.2)
    assert (completion.cached_tokens, completion.cached_tokens_by_source) == (
        576,
        {"device": 0, "host": 0, "disk": 576},
    )
    prefill = counters.prefill_reply("p", [1] * 600, meta)
    assert prefill.status is PrefillStatus.DONE
    assert prefill.cached_tokens_by_source == {"device": 0, "host": 0, "disk": 576}
    plain = counters.completion("r", [1] * 600, MetaInfo(cached_tokens=5), [7], "x", 0.1, 0.2)
    assert plain.cached_tokens_by_source == {}
