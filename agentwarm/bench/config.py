"""Benchmark configuration and the ``quick`` / ``full`` / ``server`` profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentwarm._fmt import plural
from agentwarm.bench.modes import MODES
from agentwarm.bench.workload import LAYOUTS, PromptSizes, ThinkTime
from agentwarm.errors import ConfigError
from agentwarm.runtime import PrefetchPolicy

__all__ = ("PROFILES", "BenchConfig", "Profile", "profile")


class BenchConfig(BaseModel):
    """What to replay and how. Immutable; derive variants with ``model_copy(update=...)``.

    ``episodes`` caps the test episodes replayed (``None``: the whole test split, a
    ``test_fraction`` of the file after a shuffle by ``seed``). ``pretrain`` fits agentwarm's
    predictor on the training split before the first test episode; it keeps learning online
    either way. ``think`` is a :class:`ThinkTime` spec. ``system_file`` / ``tools_file``
    replace the generated policy and tool schemas.

    ``conversations`` replays real conversations (:mod:`agentwarm.bench.conversations`)
    instead of ``trajectories``: their system message is the policy and, without
    ``tools_file``, the ``tools.json`` beside the file (when there is one) gives the schemas.
    ``max_steps`` replays only the first steps of each test episode (training sees them whole).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    trajectories: Path | None = None
    conversations: Path | None = None
    system_file: Path | None = None
    tools_file: Path | None = None
    layout: str = "subagent"
    modes: tuple[str, ...] = MODES
    episodes: int | None = Field(default=None, ge=1)
    max_steps: int | None = Field(default=None, ge=1)
    test_fraction: float = Field(default=0.2, gt=0.0, le=1.0)
    seed: int = 0
    think: str = "lognormal:mean=1.0,sigma=0.5"
    pretrain: bool = True
    fast_baselines: bool = True
    sizes: PromptSizes = PromptSizes()
    policy: PrefetchPolicy = PrefetchPolicy()

    @field_validator("layout")
    @classmethod
    def _layout(cls, v: str) -> str:
        if v not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
        return v

    @field_validator("modes")
    @classmethod
    def _modes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [m for m in v if m not in MODES]
        if bad or not v:
            raise ValueError(f"modes must be among {', '.join(MODES)}; got {', '.join(v)}")
        return tuple(m for m in MODES if m in v)

    @field_validator("think")
    @classmethod
    def _think(cls, v: str) -> str:
        try:
            return str(ThinkTime.parse(v))
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc

    def summary(self) -> dict[str, Any]:
        """JSON-serializable view for reports."""
        out = self.model_dump(mode="json", exclude={"policy", "sizes"})
        out["sizes"] = _sizes(self.sizes)
        out["policy"] = self.policy.model_dump(mode="json")
        return out


def _sizes(s: PromptSizes) -> dict[str, Any]:
    return {
        "policy": s.policy,
        "instructions": list(s.instructions),
        "schema": list(s.schema),
        "opening": list(s.opening),
        "result": list(s.result),
        "output_tokens": s.output_tokens,
    }


class Profile(BaseModel):
    """A named preset: the model to run and the configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: str
    config: BenchConfig
    description: str
    #: Printed with the report (and ``noise_note`` in ``--json``) when its figures mean little;
    #: ``{episodes}`` stands for the episodes replayed ("1 short episode"), see :meth:`note`.
    noise_note: str | None = None

    def note(self, episodes: int) -> str | None:
        """The noise note of a report over ``episodes`` test episodes (``None``: none)."""
        if self.noise_note is None:
            return None
        return self.noise_note.format(episodes=plural(episodes, "short episode"))


PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        model="tiny",
        description=(
            "tiny preset, 6 short episodes (at most 6 steps each), short think times: "
            "a smoke test (CI)"
        ),
        noise_note=(
            "quick profile: a smoke test (tiny model, {episodes}); its ratios are noise "
            "and vary from run to run (agentwarm can even 'beat' the oracle) - "
            "use --profile full for figures"
        ),
        config=BenchConfig(
            episodes=6,
            max_steps=6,
            think="lognormal:mean=0.15,sigma=0.5",
            sizes=PromptSizes(
                policy=240,
                instructions=(60, 120),
                schema=(40, 80),
                opening=(20, 40),
                result=(20, 120),
                output_tokens=8,
            ),
        ),
    ),
    "full": Profile(
        name="full",
        model="small",
        description=(
            "small preset (SmolLM-135M shape), 5 test episodes of at most 8 steps each, "
            "1-5k-token prompts, seconds of think time: sized to finish in 30 minutes on "
            "2 CPU cores, real conversations included"
        ),
        config=BenchConfig(
            episodes=5,
            max_steps=8,
            think="lognormal:mean=4.0,sigma=0.5",
            sizes=PromptSizes(
                policy=800,
                instructions=(250, 500),
                schema=(100, 200),
                opening=(50, 100),
                result=(40, 240),
                output_tokens=8,
            ),
        ),
    ),
    "server": Profile(
        name="server",
        model="small",
        description=(
            "for a serving engine on 2 CPU cores (--engine vllm:URL or an SGLang URL, "
            "SmolLM2-135M; --model is then the tokenizer): reactive, agentwarm and oracle on "
            "one server, 6 test episodes of at most 5 steps, ~500-900-token prompts, "
            "lognormal think time of 12 s mean (a vLLM-CPU server on these cores prefills "
            "~35-40 tokens/s: a next step's new head takes most of a think time); sized to "
            "finish in about 20 minutes"
        ),
        config=BenchConfig(
            modes=("reactive", "agentwarm", "oracle"),
            episodes=6,
            max_steps=5,
            think="lognormal:mean=12.0,sigma=0.4",
            sizes=PromptSizes(
                policy=300,
                instructions=(80, 150),
                schema=(40, 80),
                opening=(20, 40),
                result=(20, 80),
                output_tokens=8,
            ),
        ),
    ),
}


def profile(name: str) -> Profile:
    """The profile called ``name``; :class:`ConfigError` naming the choices otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; profiles: {', '.join(PROFILES)}") from None
