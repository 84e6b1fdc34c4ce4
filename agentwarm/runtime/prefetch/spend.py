"""Spend by expected value: how many speculative candidates a step sends (issue 15).

**The model.** A candidate ``i`` of probability ``p_i`` whose prefill computes ``n_i`` new
tokens (its known prefix less what is cached already) saves ``p_i * n_i`` tokens of live
prefill in expectation (it is the next step with probability ``p_i``, and then its live request
finds them cached) and wastes ``(1 - p_i) * n_i``. A wasted token costs the engine time it took:

* ``free_tokens = max(0, throughput_tok_s * expected_idle_s - queued_tokens)`` tokens can be
  prefilled before the next live request is expected (after the speculative tokens already
  queued): each costs ``idle_price`` (default 0.1: on a shared GPU, other tenants' time);
* each token past that window delays live work and costs ``busy_price`` (default 1.0: a live
  token's worth).

Candidates are taken in the predictor's order. With ``S`` tokens already chosen, candidate
``i``'s tokens fill ``[S, S + n_i)`` of the window: ``a = clamp(free_tokens - S, 0, n_i)`` of
them idle, ``b = n_i - a`` busy, at the blended price ``price_i = (a * idle_price + b *
busy_price) / n_i`` (``idle_price`` when it fits whole, ``busy_price`` when the window is spent
before it; with ``n_i = 0``, the price of the window's next token). It is sent iff::

    p_i * n_i >= (1 - p_i) * n_i * price_i   <=>   p_i >= price_i / (1 + price_i)

With the defaults: ``p >= 0.1 / 1.1 = 0.0909`` within the window, ``p >= 1 / 2 = 0.5`` past
it. A candidate not sent takes no room in the window, so a later, smaller one may still fit.
``END`` is never sent (there is no prompt), but its probability is part of the distribution: a
likely end leaves less probability to the others. ``top_n`` stays a hard cap, ``min_p`` a floor
and ``top_p`` a coverage bound, exactly as in :func:`~agentwarm.runtime.policy.choose_candidates`
(and the guardrail's :class:`~agentwarm.runtime.guardrail.Limits` apply the same way).

Example: ``free_tokens`` 1000; A (p 0.4, 600 tokens) fits whole: sent, ``S`` = 600; B (p 0.3,
800 tokens) would be 400 idle + 400 busy, ``price`` 0.55, threshold 0.355: not sent; C (p 0.1,
300 tokens) fits whole: sent.

**Using all the idle time.** The window is an expectation: think times vary, and on an engine
whose live requests preempt speculation at once and which runs one request at a time
(``Engine.preempts_speculation``: the embedded engine) a token past the window costs live work
nothing: the next live request overtakes it (a loser is then stopped, a winner's live request
computes only what it has not). So with ``PrefetchPolicy.fill_idle`` (default) on such an
engine (``overtaken``): a candidate that starts inside the window is priced ``idle_price`` in
full (its tokens past the window are computed only if the idle time lasts); one that would start
past it is held back (priced busy, as before), and once the step's speculation has all finished
and its next live call has not come, the engine is idle *now*: the likeliest candidate left
worth sending at ``idle_price`` is sent, one at a time (its end asks again). A candidate is thus
issued only when there is idle time to compute it in. Engines that batch speculation with live
work (vLLM, SGLang) keep the blended price.

**The inputs** are plain numbers, learned by :class:`SpendEstimator` (one per workflow, or per
engine: it holds no run's state): the prefill throughput (an EWMA over finished prefills, each
timed by its service time, a prefill a live call overtook left out: see
:class:`~agentwarm.runtime.prefetch.sender.Sender`), the expected idle seconds after each node's
speculation (an EWMA per node, fed through a run's :class:`IdleClock`), and the queued tokens
the caller knows: the *work* in flight (what each admitted prefill computes, not its prompt's
length: :attr:`~agentwarm.runtime.admission.Admission.work_in_flight`). Before anything is
observed the idle window is infinite: every token is priced ``idle_price``.
:class:`SentPrefixes` estimates a candidate's new tokens from what was sent for it before (its
prefix grows append-only).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from agentwarm.runtime.guardrail import Limits
from agentwarm.runtime.policy import PrefetchPolicy, choose_candidates

__all__ = (
    "IdleClock",
    "SentPrefixes",
    "SpendEstimator",
    "choose",
    "choose_by_value",
    "common_prefix_len",
    "threshold",
)

#: Weight of the newest observation in the estimator's EWMAs.
SPEND_ALPHA = 0.25
#: Tags a run's own entry in :class:`SentPrefixes`.
_RUN = "run"


def threshold(price: float) -> float:
    """The least probability worth sending at ``price`` per wasted token:
    ``p * n >= (1 - p) * n * price  <=>  p >= price / (1 + price)``."""
    return price / (1.0 + price)


def _price(
    spent: float,
    n: int,
    free_tokens: float,
    idle_price: float,
    busy_price: float,
    overtaken: bool = False,
) -> float:
    """The price per token of ``n`` tokens sent after ``spent`` within a ``free_tokens`` window;
    ``overtaken``: tokens past the window are overtaken by the next live request (module doc),
    so a candidate that starts inside the window costs ``idle_price`` throughout."""
    room = free_tokens - spent
    if n == 0 or overtaken:
        return idle_price if room > 0 else busy_price
    if room >= n:
        return idle_price
    if room <= 0:
        return busy_price
    return (room * idle_price + (n - room) * busy_price) / n


def choose_by_value(
    predictions: Sequence[tuple[str, float]],
    *,
    new_tokens: Callable[[str], int],
    free_tokens: float,
    top_n: int,
    min_p: float,
    top_p: float = 1.0,
    idle_price: float = 0.1,
    busy_price: float = 1.0,
    priced: dict[str, float] | None = None,
    overtaken: bool = False,
) -> list[tuple[int, str, float]]:
    """The candidates worth sending (module doc), as ``(rank, name, probability)`` in
    predicted order: the shape of :func:`~agentwarm.runtime.policy.choose_candidates`.
    ``overtaken``: the engine's live requests preempt speculation (module doc, *filling idle
    time*): a candidate that starts inside the window is priced idle in full.

    ``new_tokens(name)`` is what ``name``'s prefill would compute; it is asked only of
    candidates within ``top_n``, ``min_p`` and ``top_p``. ``free_tokens`` is the idle window
    (``math.inf``: every token is idle). ``priced``, when given, is told the price per token
    of each candidate the price refused (a miss reason: ``priced_out``).
    """
    chosen: list[tuple[int, str, float]] = []
    spent = 0
    # The candidates top_p and min_p allow (END never, its mass counted), uncapped: one the
    # price refuses takes no top_n slot.
    allowed = choose_candidates(predictions, top_n=len(predictions), min_p=min_p, top_p=top_p)
    for rank, name, p in allowed:
        if len(chosen) >= top_n:
            break
        n = max(0, new_tokens(name))
        price = _price(spent, n, free_tokens, idle_price, busy_price, overtaken)
        if p >= threshold(price):
            chosen.append((rank, name, p))
            spent += n
        elif priced is not None:
            priced[name] = price
    return chosen


def choose(
    predictions: Sequence[tuple[str, float]],
    *,
    policy: PrefetchPolicy,
    limits: Limits,
    new_tokens: Callable[[str], int] = lambda _: 0,
    free_tokens: float = math.inf,
    priced: dict[str, float] | None = None,
    overtaken: bool = False,
) -> list[tuple[int, str, float]]:
    """A step's candidates under ``policy.spend`` within the guardrail's ``limits``:
    :func:`choose_by_value`, or (``top_n``) :func:`~agentwarm.runtime.policy.choose_candidates`
    (``new_tokens`` and ``free_tokens`` unused). A caller that knows neither the throughput nor
    the idle time (the gateway) leaves the window infinite: every token at ``idle_price``.
    ``priced`` is told the price of each candidate the price refused (:func:`choose_by_value`)."""
    if policy.spend == "top_n":
        return choose_candidates(
            predictions, top_n=limits.top_n, min_p=limits.min_p, top_p=limits.top_p
        )
    return choose_by_value(
        predictions,
        new_tokens=new_tokens,
        free_tokens=free_tokens,
        top_n=limits.top_n,
        min_p=limits.min_p,
        top_p=limits.top_p,
        idle_price=policy.idle_price,
        busy_price=policy.busy_price,
        priced=priced,
        overtaken=overtaken,
    )


class SpendEstimator:
    """What the spend decision learns: prefill throughput and, per node, the idle seconds
    after its step's speculation (both EWMAs of weight ``alpha``). Plain numbers in, plain
    numbers out; no engine, no clock.

    The throughput is ``EWMA(tokens) / EWMA(seconds)`` over finished prefills (a ratio of
    averages: a long prefill weighs more than a short one, whose time is mostly overhead);
    ``math.inf`` until a prefill is observed. A node's idle time is ``math.inf`` until observed.
    """

    def __init__(self, *, alpha: float = SPEND_ALPHA) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._tokens: float | None = None
        self._seconds = 0.0
        self._idle: dict[str, float] = {}

    def _ewma(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.alpha * (new - old)

    @property
    def throughput_tok_s(self) -> float:
        """Prefill tokens per second (``math.inf`` before any prefill is observed)."""
        if self._tokens is None:
            return math.inf
        return self._tokens / self._seconds

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """A prefill computed ``tokens`` in ``seconds`` (ignored unless both are positive)."""
        if tokens <= 0 or not 0.0 < seconds < math.inf:
            return
        first = self._tokens is None
        self._tokens = self._ewma(self._tokens, float(tokens))
        self._seconds = seconds if first else self._ewma(self._seconds, seconds)

    def idle_s(self, node: str) -> float:
        """Expected seconds from ``node``'s speculation to the run's next live LLM call."""
        return self._idle.get(node, math.inf)

    def observe_idle(self, node: str, seconds: float) -> None:
        """After ``node``'s speculation, the run's next live LLM call came ``seconds`` later."""
        if 0.0 <= seconds < math.inf:
            self._idle[node] = self._ewma(self._idle.get(node), seconds)

    def free_tokens(self, node: str, queued_tokens: float = 0.0, elapsed_s: float = 0.0) -> float:
        """The idle window after ``node``'s speculation, in tokens, ``elapsed_s`` into it (a
        re-ranking later in the step): ``max(0, throughput_tok_s * max(0, idle_s(node) -
        elapsed_s) - queued_tokens)``."""
        idle = max(0.0, self.idle_s(node) - elapsed_s)
        if idle == 0.0:
            return 0.0  # also with an unknown (infinite) throughput
        return max(0.0, self.throughput_tok_s * idle - queued_tokens)


class IdleClock:
    """One run's measurement of idle time for a :class:`SpendEstimator`: :meth:`speculated`
    when a step speculates, :meth:`live` before each live LLM call; the first live call after
    a step's first speculation gives that node its idle seconds (a re-ranking of the same step
    keeps the mark: the window runs from the first speculation)."""

    def __init__(
        self, estimator: SpendEstimator, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.estimator = estimator
        self._clock = clock
        self._mark: tuple[str, float, object] | None = None

    def speculated(self, node: str, step: object = None) -> float:
        """``node``'s step (``step``: its identity) speculates now; returns the seconds since
        that step's first speculation still unmeasured (0.0 for a new mark). Another step's
        speculation replaces an unmeasured mark; the same step's (a re-ranking) keeps it."""
        now = self._clock()
        if self._mark is not None and step is not None and self._mark[2] is step:
            return now - self._mark[1]
        self._mark = (node, now, step)
        return 0.0

    def pending(self, step: object) -> bool:
        """Whether ``step`` speculated and no live call has come since (its idle time runs)."""
        return self._mark is not None and self._mark[2] is step

    def live(self) -> None:
        """A live LLM call starts now: the idle time since the mark ends."""
        if self._mark is not None:
            node, at, _ = self._mark
            self._mark = None
            self.estimator.observe_idle(node, self._clock() - at)


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (slices compare in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class SentPrefixes:
    """The latest token ids sent under each key (a node, or ``(namespace, node)`` to share
    across runs), to estimate what a candidate's prefill would compute: the tokens past what was
    sent for it before (a node's prefix grows append-only). Optimistic: an engine may have
    evicted them.

    A ``run`` also keeps its own entry, consulted before the shared one (concurrent runs send
    different conversations under one key). At most ``max_entries`` entries are kept, the least
    recently used forgotten first (a forgotten one costs its whole prefix: a cautious estimate).
    """

    def __init__(self, max_entries: int = 1024) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._sent: OrderedDict[Hashable, Sequence[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sent)

    def _put(self, key: Hashable, ids: Sequence[int]) -> None:
        self._sent[key] = ids
        self._sent.move_to_end(key)
        while len(self._sent) > self.max_entries:
            self._sent.popitem(last=False)

    def _get(self, key: Hashable) -> Sequence[int] | None:
        ids = self._sent.get(key)
        if ids is not None:
            self._sent.move_to_end(key)
        return ids

    def sent(self, key: Hashable, ids: Sequence[int], run: Hashable = None) -> None:
        """``ids`` were sent (prefilled) under ``key`` (by ``run``, when given)."""
        self._put(key, ids)
        if run is not None:
            self._put((_RUN, run, key), ids)

    def new_tokens(self, key: Hashable, ids: Sequence[int], run: Hashable = None) -> int:
        """Tokens of ``ids`` past their common prefix with the latest sent under ``key`` (by
        ``run`` if it sent any, else by anyone)."""
        mine = self._get((_RUN, run, key)) if run is not None else None
        latest = mine if mine is not None else self._get(key)
        return len(ids) - common_prefix_len(ids, latest or ())
