"""Benchmark figures: per-mode statistics, the headline ratios, a table, JSON and a TTFT plot.

Definitions (those of :mod:`agentwarm.stats.definitions`, shared with runs and traces):

* TTFT: time to first token of each step's LLM call, as the node saw it.
* makespan: wall time of one episode (one workflow run), averaged over episodes; for baselines
  run with ``fast_baselines`` it is the run's wall time plus its (not slept) think time.
* ``prompt_tokens_mean``: prompt tokens of a step that called the model, on average.
* ``computed_tokens``: prompt tokens the engine prefilled for the mode, live and speculative
  (sum of the engine's per-request answers); ``wasted_tokens``: those computed by speculative
  prefetches whose target was not taken; ``useful_tokens`` the rest.
* ``acceptance_ratio``: speculative prefetches taken / issued (``None`` when none was issued);
  ``branch_hit_rate``: steps whose node had been prefetched / steps with a previous step
  (``None`` when no prefetch was issued, :mod:`agentwarm.stats.definitions`).
* ``peak_rss_mib``: the process's peak resident set (``ru_maxrss``), per mode once its engine
  was released, and for the whole bench.
* ``itl_mean_s`` / ``itl_p50_s`` / ``itl_p95_s``: inter-token latency of the live requests
  (each finished generate with at least 2 output tokens: its seconds between output tokens
  after the first, :attr:`RequestRecord.itl_s`), mean and percentiles over those requests
  (``None`` when none has one); ``itl_slowdown_vs_reactive`` = agentwarm / reactive mean ITL:
  what speculation running beside the live requests costs their decoding.
* Mid-decode hints (:mod:`agentwarm.stats.hints`): ``hint_steps`` steps had a successor named
  by their streamed output before they ended, ``hints_right`` of those hints named one of the
  step's actual next nodes; ``hint_lead_mean_s`` / ``hint_lead_p50_s``: mean / median seconds
  from the hint to the step's end (``None`` without hints); ``hint_gain_mean_s`` /
  ``hint_gain_p50_s``: of seconds from the hint to the end of the LLM call it was read from
  (what reading mid-decode gained over reading the finished output). The table shows them in
  ms.
* ``gap_closed``, the speedups and ``gap_to_oracle``: :mod:`agentwarm.bench.headline`.
* ``miss_reasons`` (:class:`~agentwarm._spec.MissReason`): a mode's branch misses and short hits
  (``short_hits``: hits that did not find their whole prefetched prefix cached) by reason; they
  add up to the misses plus the short hits.
* ``next_turn``'s ``branch_hit_rate``, ``miss_reasons``, ``short_hits``, ``acceptance_ratio``,
  ``prefetches_issued`` and ``wasted_tokens`` score its warms instead
  (:mod:`agentwarm.bench.nextturn_figures`, which adds ``next_turn_*`` keys); its
  ``computed_tokens`` include the warms'.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentwarm._fmt import reasons
from agentwarm.bench.headline import gap_to_oracle, headline
from agentwarm.bench.modes import MODES, ModeRun
from agentwarm.bench.nextturn_figures import next_turn_figures
from agentwarm.errors import ConfigError
from agentwarm.runtime import summarize
from agentwarm.stats.definitions import has_previous, percentile
from agentwarm.stats.hints import hint_figures

__all__ = ("BenchReport", "gap_to_oracle", "headline", "mode_figures", "require_matplotlib")


def mode_figures(run: ModeRun) -> dict[str, Any]:
    """Figures of one mode (see the module docstring for the definitions)."""
    s = summarize(run.results)
    steps = [st for r in run.results for st in r.steps]
    confirmed = [p for st in steps for p in st.prefetches if not p.speculative]
    spec = [p for r in run.results for p in r.speculative_prefetches]
    live = [q for q in run.requests if q.kind == "generate"]
    prefills = [q for q in run.requests if q.kind == "prefill"]
    turn = next_turn_figures(run.results, run.next_turn) if run.next_turn is not None else {}
    computed = sum(q.computed_tokens for q in run.requests) + turn.get(
        "next_turn_computed_tokens", 0
    )
    mismatched = sum(
        1
        for q in run.requests
        if q.status == "done" and q.cached_tokens + q.computed_tokens != q.prompt_tokens
    )
    hit = [st.ttft_s for st in steps if st.prefetched and st.ttft_s is not None]
    miss = [
        st.ttft_s
        for st in steps
        if not st.prefetched and has_previous(st) and st.ttft_s is not None
    ]
    itl = [v for q in live if (v := q.itl_s) is not None]
    prompt = s["prompt_tokens"]
    think = run.accounted_think_s or [0.0] * len(run.results)
    makespans = [r.duration_s + t for r, t in zip(run.results, think, strict=True)]
    asked = [st.prompt_tokens for st in steps if st.llm_calls]
    live_pre = [st.prompt_tokens - st.cached_tokens for st in steps if st.prefetched]
    live_other = [
        st.prompt_tokens - st.cached_tokens
        for st in steps
        if not st.prefetched and has_previous(st)
    ]
    figures: dict[str, Any] = {
        "episodes": len(run.results),
        "steps": s["steps"],
        "ttft_mean_s": s["ttft_mean_s"],
        "ttft_p50_s": s["ttft_p50_s"],
        "ttft_p95_s": s["ttft_p95_s"],
        "makespan_s": statistics.fmean(makespans) if makespans else None,
        "itl_mean_s": statistics.fmean(itl) if itl else None,
        "itl_p50_s": percentile(itl, 50),
        "itl_p95_s": percentile(itl, 95),
        "wall_s": run.wall_s,
        "prompt_tokens": prompt,
        "prompt_tokens_mean": statistics.fmean(asked) if asked else None,
        "cached_tokens": s["cached_tokens"],
        "cache_hit_ratio": s["cached_tokens"] / prompt if prompt else 0.0,
        "computed_tokens": computed,
        "live_computed_tokens": sum(q.computed_tokens for q in live),
        "prefill_computed_tokens": sum(q.computed_tokens for q in prefills),
        "confirmed_computed_tokens": sum(p.computed_tokens for p in confirmed),
        "useful_tokens": computed - s["wasted_tokens"],
        "wasted_tokens": s["wasted_tokens"],
        "acceptance_ratio": s["acceptance_ratio"] if s["prefetches_issued"] else None,
        "branch_hit_rate": s["branch_hit_rate"],
        "short_hits": s["short_hits"],
        "miss_reasons": s["miss_reasons"],
        "prefetches_issued": s["prefetches_issued"],
        "prefetch_hits": s["prefetch_hits"],
        "prefetch_requests": sum(p.requests for p in spec),
        "ttft_prefetched_mean_s": statistics.fmean(hit) if hit else None,
        "ttft_not_prefetched_mean_s": statistics.fmean(miss) if miss else None,
        "live_computed_mean_prefetched": statistics.fmean(live_pre) if live_pre else None,
        "live_computed_mean_not_prefetched": (statistics.fmean(live_other) if live_other else None),
        "think_accounted_s": sum(think),
        "guardrail_levels": dict(Counter(r.guardrail_level for r in run.results)),
        "requests": len(run.requests),
        "accounting_mismatched_requests": mismatched,
        "engine_computed_tokens": (
            run.engine_stats["computed_tokens"] if run.engine_stats is not None else None
        ),
        "pretrained_transitions": run.pretrained_transitions,
        "peak_rss_mib": run.peak_rss_mib,
        **hint_figures(steps, lambda st: st.next).to_dict(),
    }
    if turn:  # its warms: what it issued and what the next live requests found
        figures.update(turn, useful_tokens=computed - turn["wasted_tokens"])
    return figures


def require_matplotlib() -> None:
    """Raise :class:`ConfigError` with install advice when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "--plot needs matplotlib (an agentwarm dependency), which is not installed: "
            "pip install 'matplotlib>=3.8'"
        ) from exc


@dataclass
class BenchReport:
    """The benchmark's outcome: configuration, per-mode figures, headline ratios; and, not
    part of :meth:`to_dict`, each mode's per-step TTFTs (for plots) and raw :class:`ModeRun`
    (run results and per-request engine answers)."""

    config: dict[str, Any]
    workload: dict[str, Any]
    modes: dict[str, dict[str, Any]]
    ttfts: dict[str, list[float]] = field(default_factory=dict)
    runs: dict[str, ModeRun] = field(default_factory=dict)
    elapsed_s: float = 0.0
    #: Why the figures mean little (the quick profile), or ``None``.
    noise_note: str | None = None
    #: One-line remarks on the inputs (e.g. steps replayed without a tool schema).
    notes: list[str] = field(default_factory=list)
    #: The process's peak resident set over the bench, in MiB (``None``: not known).
    peak_rss_mib: float | None = None
    #: :func:`gap_to_oracle` of the runs (``None`` without agentwarm and oracle).
    gap_to_oracle: dict[str, Any] | None = None

    @classmethod
    def from_runs(
        cls, runs: list[ModeRun], *, config: dict[str, Any], workload: dict[str, Any]
    ) -> BenchReport:
        return cls(
            config=config,
            workload=workload,
            modes={r.mode: mode_figures(r) for r in runs},
            ttfts={
                r.mode: [s.ttft_s for res in r.results for s in res.steps if s.ttft_s is not None]
                for r in runs
            },
            runs={r.mode: r for r in runs},
            gap_to_oracle=gap_to_oracle({r.mode: r for r in runs}),
        )

    @property
    def headline(self) -> dict[str, float | None]:
        return headline(self.modes)

    def to_dict(self) -> dict[str, Any]:
        """One JSON-serializable object: ``modes``, the headline keys, ``config``,
        ``workload``, ``elapsed_s``, ``peak_rss_mib``, ``gap_to_oracle`` (object or null),
        ``noise_note`` (string or null) and ``notes``."""
        return {
            "modes": self.modes,
            **self.headline,
            "gap_to_oracle": self.gap_to_oracle,
            "config": self.config,
            "workload": self.workload,
            "elapsed_s": self.elapsed_s,
            "peak_rss_mib": self.peak_rss_mib,
            "noise_note": self.noise_note,
            "notes": list(self.notes),
        }

    def render(self, console: Console) -> None:
        """Print the comparison table (one column per mode) and the headline line."""
        modes = [m for m in MODES if m in self.modes]
        first = self.modes[modes[0]]
        table = Table(
            title=f"agentwarm bench · {self.config.get('layout', '')} layout · "
            f"{first['episodes']} episodes, {first['steps']} steps",
            title_justify="left",
            header_style="bold",
        )
        table.add_column("")
        for m in modes:
            table.add_column(m, justify="right")
        rows: list[tuple[str, str, Any]] = [
            ("TTFT mean ms", "ttft_mean_s", _ms),
            ("TTFT p50 ms", "ttft_p50_s", _ms),
            ("TTFT p95 ms", "ttft_p95_s", _ms),
            ("episode makespan s", "makespan_s", _s),
            ("live ITL mean ms", "itl_mean_s", _ms),
            ("live ITL p95 ms", "itl_p95_s", _ms),
            ("prompt tokens cached", "cache_hit_ratio", _pct),
            ("prefill tokens computed", "computed_tokens", str),
            ("  of which live", "live_computed_tokens", str),
            ("  of which wasted", "wasted_tokens", str),
            ("acceptance ratio", "acceptance_ratio", _pct),
            ("branch hit rate", "branch_hit_rate", _pct),
        ]
        for label, key, fmt in rows:
            cells = []
            for m in modes:
                value = self.modes[m][key]
                spec = self.modes[m]["prefetches_issued"] > 0
                cells.append("—" if key == "branch_hit_rate" and not spec else fmt(value))
            table.add_row(label, *cells)
        if any(self.modes[m].get("hint_steps") for m in modes):
            table.add_row("mid-decode hints (right)", *(_hints(self.modes[m]) for m in modes))
            for label, key in (
                ("  hint lead mean ms", "hint_lead_mean_s"),
                ("  hint lead p50 ms", "hint_lead_p50_s"),
                ("  hint gain mean ms", "hint_gain_mean_s"),
                ("  hint gain p50 ms", "hint_gain_p50_s"),
            ):
                table.add_row(label, *(_ms(self.modes[m].get(key)) for m in modes))
        console.print(table)
        h = self.headline
        console.print(
            f"gap closed [bold]{_num(h['gap_closed'])}[/] · TTFT speedup vs reactive "
            f"[bold]{_x(h['ttft_speedup_vs_reactive'])}[/] (oracle "
            f"{_x(h['oracle_ttft_speedup_vs_reactive'])}) · makespan speedup "
            f"{_x(h['makespan_speedup_vs_reactive'])} · ITL agentwarm/reactive "
            f"{_x(h['itl_slowdown_vs_reactive'])} · {self.elapsed_s:.0f} s · peak RSS "
            f"{_mib(self.peak_rss_mib)}"
        )
        gap = self.gap_to_oracle
        if gap is not None:
            parts = ", ".join(
                f"{k} steps ({gap['steps'][k]}) {v * 1000:+.0f} ms"
                for k, v in gap["by_outcome_s"].items()
            )
            console.print(
                f"agentwarm − oracle mean TTFT {gap['total_s'] * 1000:+.0f} ms, from {parts}",
                highlight=False,
            )
            why = ", ".join(
                f"{k} ({gap['reason_steps'][k]}) {v * 1000:+.0f} ms"
                for k, v in gap["by_reason_s"].items()
            )
            console.print(f"  by miss reason: {why}", highlight=False)
        if "next_turn" in self.modes:
            console.print(
                f"next_turn: gap closed {_num(h['next_turn_gap_closed'])} (live tokens "
                f"{_num(h['next_turn_gap_closed_live_tokens'])}; agentwarm's "
                f"{_num(h['gap_closed_live_tokens'])}) · agentwarm TTFT speedup vs next_turn "
                f"{_x(h['ttft_speedup_vs_next_turn'])}",
                highlight=False,
            )
        for m in ("next_turn", "agentwarm"):
            if m in self.modes:
                f = self.modes[m]
                console.print(
                    f"{m} miss reasons: {reasons(f['miss_reasons'])} "
                    f"({f['short_hits']} short hits among them)",
                    highlight=False,
                )
        if self.noise_note:
            console.print(f"[yellow]note:[/] {self.noise_note}", highlight=False)

    def plot(self, path: Path) -> None:
        """Write the TTFT CDF of every mode to ``path`` (PNG); needs matplotlib."""
        require_matplotlib()
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for mode in [m for m in MODES if m in self.ttfts]:
            xs = sorted(v * 1000 for v in self.ttfts[mode])
            if not xs:
                continue
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", label=mode)
        ax.set_xscale("log")
        ax.set_xlabel("TTFT (ms, log scale)")
        ax.set_ylabel("fraction of steps")
        ax.set_ylim(0, 1.01)
        ax.grid(True, which="both", alpha=0.3)
        h = self.headline
        ax.set_title(
            f"TTFT CDF · {self.config.get('layout', '')} layout · gap closed "
            f"{_num(h['gap_closed'])}"
        )
        ax.legend(loc="lower right")
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=120)
        except OSError as exc:
            raise ConfigError(f"--plot {path}: cannot write it ({exc.strerror})") from exc
        finally:
            plt.close(fig)


def _hints(figures: dict[str, Any]) -> str:
    right = figures.get("hints_right")
    return f"{figures.get('hint_steps', 0)} ({'—' if right is None else right})"


def _mib(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f} MiB"


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:.1f}"


def _s(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.0%}"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"
