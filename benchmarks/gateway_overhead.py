"""The gateway's overhead per request (``benchmarks/gateway_bench.py --overhead``).

Three stacks on fake upstreams that cost nothing (``seconds_per_token=0``,
``seconds_per_output_token=0``), all alive at once: ``direct`` (the client talks to
``agentwarm serve``), ``nohooks`` (through the gateway as a plain proxy) and ``learner`` (through
the gateway with its learner, prefetching). Each request of the subagent replay (no think time)
is sent to the three in turn, the order rotating per request, so that each gateway request is
paired with the same direct one sent moments apart. Per gateway kind: p50/p95 of the client's
end-to-end time, and of the paired differences to ``direct`` (``added_*``: what the gateway
costs a client), and the gateway's own ``overhead_*`` (receipt to the request handed to the
upstream, from its metrics).

The goal (:data:`GOAL_MS`) is checked on the learner's own overhead (``goal_met``: what the
gateway's ``agentwarm:gateway_overhead_seconds`` measures) and on what a plain proxy adds to a
client's request (``hop_goal_met``: the extra HTTP hop, body parsing and relaying included).
The learner's ``added_*`` are no overhead figure: its prefetches do part of the upstream's work
for the next request ahead of time, which even a zero-cost engine spends CPU on (the radix
cache), so they can be negative.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

from agentwarm.bench.workload import Workload
from agentwarm.stats.definitions import percentile
from benchmarks.gateway_replay import (
    KINDS,
    EngineSpec,
    Replay,
    Sample,
    Stack,
    ask,
    renderer_for,
    requests_of,
    stack,
)

__all__ = ("GOAL_MS", "measure_overhead")

#: Goal (issue 13): what the gateway adds to a request, p50, with a fake upstream.
GOAL_MS = 2.0
#: Requests per stack before measuring (connections opened, the learner's first nodes seen).
WARM_REQUESTS = 10


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000.0


def _bodies(workload: Workload, replay: Replay, n: int) -> list[dict[str, Any]]:
    scripts = [*replay.warmup, *replay.measured]
    everything = [body for s in scripts for _, body in requests_of(workload, s)]
    if not everything:
        raise ValueError("the replay holds no request")
    return list(itertools.islice(itertools.cycle(everything), n))


async def measure_overhead(replay: Replay, *, requests: int, max_tokens: int) -> dict[str, Any]:
    """The figures of the module docstring over ``requests`` requests (after
    :data:`WARM_REQUESTS` unmeasured ones) of ``replay`` (built for a fake engine)."""
    spec = EngineSpec("fake", seconds_per_token=0.0, seconds_per_output_token=0.0)
    renderer = renderer_for(spec)
    bodies = _bodies(replay.workload, replay, WARM_REQUESTS + requests)
    samples: dict[str, list[Sample]] = {kind: [] for kind in KINDS}
    async with contextlib.AsyncExitStack() as exits:
        stacks: list[Stack] = [
            await exits.enter_async_context(stack(kind, spec, renderer)) for kind in KINDS
        ]
        for i, body in enumerate(bodies):
            rotation = stacks[i % len(stacks) :] + stacks[: i % len(stacks)]
            for target in rotation:
                sample = await ask(target, body, max_tokens=max_tokens)
                if i >= WARM_REQUESTS:
                    samples[target.kind].append(sample)
        gateway = {s.kind: s.gateway_summary() for s in stacks}
    direct = [s.total_s for s in samples["direct"]]
    out: dict[str, Any] = {
        "requests": requests,
        "goal_ms": GOAL_MS,
        "direct": {
            "p50_ms": _ms(percentile(sorted(direct), 50)),
            "p95_ms": _ms(percentile(sorted(direct), 95)),
        },
    }
    for kind in KINDS[1:]:
        total = sorted(s.total_s for s in samples[kind])
        added = sorted(s.total_s - d for s, d in zip(samples[kind], direct, strict=True))
        out[kind] = {
            "p50_ms": _ms(percentile(total, 50)),
            "p95_ms": _ms(percentile(total, 95)),
            "added_p50_ms": _ms(percentile(added, 50)),
            "added_p95_ms": _ms(percentile(added, 95)),
            "overhead_p50_ms": _ms(gateway[kind].get("overhead_p50_s")),
            "overhead_p95_ms": _ms(gateway[kind].get("overhead_p95_s")),
        }
    own = out["learner"]["overhead_p50_ms"]
    hop = out["nohooks"]["added_p50_ms"]
    out["goal_met"] = own is not None and own <= GOAL_MS
    out["hop_goal_met"] = hop is not None and hop <= GOAL_MS
    return out
