"""The text tables of ``benchmarks/gateway_bench.py``'s report (:func:`render`)."""

from __future__ import annotations

from typing import Any

__all__ = ("render",)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value * 1000:.1f} ms"
    if unit == "%":
        return f"{value:.0%}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(report: dict[str, Any]) -> str:
    """The tables of ``report`` (:func:`measure`) as text."""
    lines: list[str] = []
    rows = [
        ("TTFT mean", "ttft_mean_s", "ms"),
        ("TTFT p50", "ttft_p50_s", "ms"),
        ("TTFT p95", "ttft_p95_s", "ms"),
        ("cached prompt tokens", "cached_fraction", "%"),
        ("branch hit rate", "branch_hit_rate", "%"),
        ("acceptance", "acceptance_ratio", "%"),
        ("wasted tokens", "wasted_tokens", ""),
        ("prefetches issued", "prefetches_issued", ""),
        ("client errors", "client_errors", ""),
    ]
    for layout, lay in report["layouts"].items():
        d, g, n = lay["direct"], lay["gateway"], lay.get("next_turn", {})
        lines.append(
            f"{layout} layout: {lay['measured_conversations']} conversations measured "
            f"({d['requests']} requests) after {lay['warmup_conversations']} warm-up"
        )
        lines.append(f"  {'':<22}{'direct':>12}{'next_turn':>12}{'gateway':>12}{'ratio':>9}")
        for label, key, unit in rows:
            ratio = lay["ttft_ratio"].get(key[5:-2]) if key.startswith("ttft_") else None
            lines.append(
                f"  {label:<22}{_fmt(d[key], unit):>12}{_fmt(n.get(key), unit):>12}"
                f"{_fmt(g[key], unit):>12}{_fmt(ratio, 'x') if ratio is not None else '':>9}"
            )
        if n:
            vs = lay["ttft_ratio_vs_next_turn"]["mean"]
            lines.append(
                f"  next_turn: {n['next_turn_warms']} warms ({n['next_turn_failed']} failed), "
                f"{n['next_turn_computed_tokens']} tokens computed; gateway/next_turn mean "
                f"TTFT {_fmt(vs, 'x')}"
            )
        if g.get("miss_reasons") is not None:
            shown = ", ".join(f"{k} {n}" for k, n in g["miss_reasons"].items() if n) or "none"
            lines.append(f"  miss reasons (gateway): {shown}; short hits {g['short_hits']}")
        over = g["gateway_overhead_p50_ms"]
        verdict = "met" if lay["goal_met"] else "NOT met"
        lines.append(f"  gateway's own time per request (p50): {_num(over)} ms")
        lines.append(f"  goal: gateway/direct mean TTFT <= {lay['goal_ratio']}x: {verdict}")
        verdict = "met" if lay["hit_goal_met"] else "NOT met"
        lines.append(f"  goal: branch hit rate >= {lay['hit_goal']}, no client error: {verdict}")
        lines.append("")
    ov = report["overhead"]
    lines.append(f"gateway overhead, zero-cost fake upstream, {ov['requests']} requests each:")
    lines.append(
        f"  direct: p50 {_num(ov['direct']['p50_ms'])} ms, p95 {_num(ov['direct']['p95_ms'])} ms"
    )
    for kind in ("nohooks", "learner"):
        o = ov[kind]
        lines.append(
            f"  {kind}: adds p50 {_num(o['added_p50_ms'])} ms, p95 {_num(o['added_p95_ms'])} ms; "
            f"gateway's own time p50 {_num(o['overhead_p50_ms'])} ms, "
            f"p95 {_num(o['overhead_p95_ms'])} ms"
        )
    verdict = "met" if ov["goal_met"] else "NOT met"
    lines.append(f"  goal: the learner's own time <= {ov['goal_ms']} ms (p50): {verdict}")
    verdict = "met" if ov["hop_goal_met"] else "NOT met"
    lines.append(f"  goal: the proxy hop adds <= {ov['goal_ms']} ms (p50): {verdict}")
    lines.append(f"elapsed {report['elapsed_s']:.0f} s")
    return "\n".join(lines)
