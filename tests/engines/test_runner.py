"""Model runner: exactness of chunked prefill over cached KV, KV helpers, sampling, errors."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
import torch

from agentwarm.engines.local.kv import KV_OPS, SEQ_DIM, SequenceState, kv_len, slice_kv
from agentwarm.engines.local.model import load_model
from agentwarm.engines.local.runner import ModelRunner, make_generator, sample
from agentwarm.errors import InvalidRequest

ATOL = 1e-4


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner(load_model("tiny", seed=0))


def random_ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def random_cuts(rng: random.Random, n: int, pieces: int) -> list[int]:
    """Sorted cut points ``0 = c0 < c1 < ... < ck = n`` splitting ``n`` into ``pieces`` parts."""
    inner = sorted(rng.sample(range(1, n), min(pieces - 1, n - 1)))
    return [0, *inner, n]


def prefill(runner: ModelRunner, state: SequenceState, ids: Sequence[int], cuts: list[int]) -> list:
    """Extend ``state`` by ``ids`` chunked at ``cuts``; logits after each chunk."""
    out = []
    for a, b in itertools.pairwise(cuts):
        out.append(runner.extend(state, ids[a:b]))
    return out


def cold_greedy(runner: ModelRunner, ids: list[int], steps: int) -> list[int]:
    """Greedy decoding recomputing the whole sequence with a plain forward at every step."""
    seq = list(ids)
    out = []
    for _ in range(steps):
        token = sample(runner.forward_full(seq)[-1])
        out.append(token)
        seq.append(token)
    return out


def cached_greedy(runner: ModelRunner, state: SequenceState, logits: torch.Tensor, steps: int):
    out = []
    for i in range(steps):
        token = sample(logits)
        out.append(token)
        if i < steps - 1:
            logits = runner.decode_step(state, token)
    return out


def test_geometry(runner: ModelRunner) -> None:
    cfg = runner.loaded.config
    assert runner.num_layers == cfg.num_hidden_layers
    assert runner.num_kv_heads == cfg.num_key_value_heads
    assert runner.head_dim == cfg.hidden_size // cfg.num_attention_heads
    assert runner.kv_bytes_per_token == runner.num_layers * 2 * runner.num_kv_heads * (
        runner.head_dim * 4
    )
    assert runner.max_context >= 8192


@pytest.mark.parametrize("trial", range(6))
def test_chunked_prefill_matches_cold_forward(runner: ModelRunner, trial: int) -> None:
    rng = random.Random(trial)
    n = rng.randrange(2, 700)
    ids = random_ids(rng, n, runner.vocab_size)
    ref = runner.forward_full(ids)
    for pieces in (1, 2, rng.randrange(3, 9)):
        cuts = random_cuts(rng, n, pieces)
        state = runner.new_state(reserve=rng.choice([0, n]))
        logits = prefill(runner, state, ids, cuts)
        assert state.length == n
        for end, got in zip(cuts[1:], logits, strict=True):
            assert got.shape == (runner.vocab_size,)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, ref[end - 1], atol=ATOL, rtol=0)


@pytest.mark.parametrize("trial", range(6))
def test_reused_prefix_kv_sliced_and_concatenated(runner: ModelRunner, trial: int) -> None:
    """KV cut into pieces and glued back (as the radix cache does) gives cold-forward logits."""
    rng = random.Random(100 + trial)
    n = rng.randrange(20, 600)
    ids = random_ids(rng, n, runner.vocab_size)
    ref = runner.forward_full(ids)
    split = rng.randrange(1, n)
    warm = runner.new_state()
    prefill(runner, warm, ids[:split], random_cuts(rng, split, rng.randrange(1, 4)))
    prefix_kv = warm.kv()
    assert kv_len(prefix_kv) == split

    cuts = random_cuts(rng, split, rng.randrange(1, 6))
    copy = rng.random() < 0.5
    pieces = [slice_kv(prefix_kv, a, b, copy=copy) for a, b in itertools.pairwise(cuts)]
    if rng.random() < 0.5:
        pieces = [torch.cat(pieces, dim=SEQ_DIM)]
    state = runner.new_state(pieces)
    assert state.length == split
    suffix_cuts = [split + c for c in random_cuts(rng, n - split, rng.randrange(1, 4))]
    logits = prefill(runner, state, ids, suffix_cuts)
    for end, got in zip(suffix_cuts[1:], logits, strict=True):
        torch.testing.assert_close(got, ref[end - 1], atol=ATOL, rtol=0)


@pytest.mark.parametrize("trial", range(3))
@pytest.mark.slow
def test_greedy_decoding_cached_equals_cold(runner: ModelRunner, trial: int) -> None:
    rng = random.Random(200 + trial)
    n = rng.randrange(10, 300)
    ids = random_ids(rng, n, runner.vocab_size)
    steps = 12
    expected = cold_greedy(runner, ids, steps)

    cold_state = runner.new_state()
    got_cold = cached_greedy(runner, cold_state, runner.extend(cold_state, ids), steps)
    assert got_cold == expected

    split = rng.randrange(1, n)
    donor = runner.new_state()
    runner.extend(donor, ids[:split])
    state = runner.new_state([donor.kv(0, split // 2), donor.kv(split // 2, split)])
    logits = prefill(runner, state, ids, [split + c for c in random_cuts(rng, n - split, 2)])
    assert cached_greedy(runner, state, logits[-1], steps) == expected
    assert state.length == n + steps - 1


def test_partial_prefill_then_resume_is_exact(runner: ModelRunner) -> None:
    """KV taken from a prefill stopped after some chunks (an abort) is reusable as is."""
    rng = random.Random(11)
    ids = random_ids(rng, 500, runner.vocab_size)
    ref = runner.forward_full(ids)
    aborted = runner.new_state()
    for a in range(0, 384, 128):
        runner.extend(aborted, ids[a : a + 128], want_logits=False)
    kept = aborted.kv()
    del aborted
    resumed = runner.new_state([kept])
    cuts = [384, 434, 484, 500]
    logits = prefill(runner, resumed, ids, cuts)[-1]
    torch.testing.assert_close(logits, ref[-1], atol=ATOL, rtol=0)


def test_want_logits_false_computes_the_same_kv(runner: ModelRunner) -> None:
    rng = random.Random(3)
    ids = random_ids(rng, 64, runner.vocab_size)
    a, b = runner.new_state(), runner.new_state()
    assert runner.extend(a, ids, want_logits=False) is None
    assert runner.extend(b, ids) is not None
    assert torch.equal(a.kv(), b.kv())


def test_truncate_and_branch(runner: ModelRunner) -> None:
    rng = random.Random(5)
    trunk = random_ids(rng, 120, runner.vocab_size)
    left = trunk + random_ids(rng, 30, runner.vocab_size)
    right = trunk + random_ids(rng, 40, runner.vocab_size)
    state = runner.new_state()
    runner.extend(state, left)
    state.truncate(len(trunk))
    assert state.length == len(trunk)
    got = runner.extend(state, right[len(trunk) :])
    torch.testing.assert_close(got, runner.forward_full(right)[-1], atol=ATOL, rtol=0)
    with pytest.raises(ValueError):
        state.truncate(state.length + 1)


def test_state_grows_by_doubling_and_keeps_kv(runner: ModelRunner) -> None:
    rng = random.Random(9)
    ids = random_ids(rng, 700, runner.vocab_size)
    state = runner.new_state()
    capacities = [state.capacity]
    for a in range(0, 700, 100):
        runner.extend(state, ids[a : a + 100], want_logits=False)
        capacities.append(state.capacity)
    assert capacities == [256, 256, 256, 512, 512, 512, 1024, 1024]
    one_shot = runner.new_state(reserve=700)
    runner.extend(one_shot, ids, want_logits=False)
    assert one_shot.capacity == 700
    torch.testing.assert_close(state.kv(), one_shot.kv(), atol=1e-5, rtol=0)


def test_kv_helpers() -> None:
    kv = torch.arange(2 * 2 * 3 * 10 * 4, dtype=torch.float32).reshape(2, 2, 3, 10, 4)
    assert kv_len(kv) == 10
    view = slice_kv(kv, 2, 7)
    assert kv_len(view) == 5
    assert view.data_ptr() == kv[:, :, :, 2].data_ptr()
    copy = slice_kv(kv, 2, 7, copy=True)
    assert copy.is_contiguous() and copy.data_ptr() != view.data_ptr()
    assert torch.equal(copy, view)
    whole = slice_kv(kv, 0, 10, copy=True)
    assert whole.data_ptr() != kv.data_ptr()
    assert KV_OPS.length(kv) == 10
    part = KV_OPS.slice(kv, 4, 6)
    assert torch.equal(part, kv[:, :, :, 4:6]) and part.is_contiguous()
    assert part.numel() * part.element_size() == part.untyped_storage().nbytes()
    with pytest.raises(ValueError):
        slice_kv(kv, 3, 11)
    with pytest.raises(ValueError):
        slice_kv(kv, 5, 4)


def test_state_kv_is_an_independent_copy(runner: ModelRunner) -> None:
    state = runner.new_state()
    runner.extend(state, [1, 2, 3, 4, 5])
    kv = state.kv(1, 4)
    before = kv.clone()
    state.truncate(0)
    runner.extend(state, [9, 9, 9, 9, 9])
    assert torch.equal(kv, before)
    assert kv.numel() * kv.element_size() == 3 * runner.kv_bytes_per_token
    assert kv.untyped_storage().nbytes() == 3 * runner.kv_bytes_per_token
    with pytest.raises(ValueError):
        state.kv(0, 6)


def test_check_kv_rejects_foreign_geometry(runner: ModelRunner) -> None:
    good = torch.zeros(runner.num_layers, 2, runner.num_kv_heads, 0, runner.head_dim)
    runner.check_kv(good)
    bad_heads = torch.zeros(runner.num_layers, 2, runner.num_kv_heads + 1, 3, runner.head_dim)
    with pytest.raises(ValueError, match="does not fit"):
        runner.new_state([bad_heads])
    with pytest.raises(ValueError, match="does not fit"):
        runner.check_kv(good.to(torch.float64))
    with pytest.raises(ValueError, match="does not fit"):
        runner.check_kv(torch.zeros(3, 3))


def test_invalid_requests_leave_the_state_unchanged(runner: ModelRunner) -> None:
    state = runner.new_state()
    runner.extend(state, [10, 11, 12])
    kv = state.kv()
    with pytest.raises(InvalidRequest):
        runner.extend(state, [])
    with pytest.raises(InvalidRequest, match="outside vocabulary"):
        runner.extend(state, [1, runner.vocab_size])
    with pytest.raises(InvalidRequest, match="outside vocabulary"):
        runner.extend(state, [-1])
    assert state.length == 3 and torch.equal(state.kv(), kv)

    near_full = runner.new_state([torch.zeros(*kv.shape[:3], runner.max_context - 2, kv.shape[4])])
    with pytest.raises(InvalidRequest, match="exceeds"):
        runner.extend(near_full, [1, 2, 3])
    assert near_full.length == runner.max_context - 2


def test_sample_greedy_and_temperature() -> None:
    logits = torch.tensor([0.5, 3.0, 3.0, -1.0])
    assert sample(logits) == 1
    assert sample(logits, temperature=0.0) == 1
    peaked = torch.tensor([0.0, float("-inf"), 5.0, float("-inf")])
    gen = make_generator(0)
    assert {sample(peaked, temperature=1.0, generator=gen) for _ in range(50)} <= {0, 2}

    flat = torch.zeros(8)
    g1, g2 = make_generator(42), make_generator(42)
    seq1 = [sample(flat, temperature=0.7, generator=g1) for _ in range(40)]
    seq2 = [sample(flat, temperature=0.7, generator=g2) for _ in range(40)]
    assert seq1 == seq2
    assert len(set(seq1)) > 1

    counts = [0, 0]
    gen = make_generator(1)
    two = torch.tensor([0.0, float(torch.log(torch.tensor(3.0)))])
    for _ in range(4000):
        counts[sample(two, temperature=1.0, generator=gen)] += 1
    assert 0.70 < counts[1] / 4000 < 0.80


def test_same_seed_same_sampled_generation(runner: ModelRunner) -> None:
    ids = list(b"the quick brown fox")

    def run(seed: int) -> list[int]:
        gen = make_generator(seed)
        state = runner.new_state()
        logits = runner.extend(state, ids)
        out = []
        for _ in range(10):
            token = sample(logits, temperature=1.0, generator=gen)
            out.append(token)
            logits = runner.decode_step(state, token)
        return out

    assert run(5) == run(5)
