"""The benchmark workload: recorded agent episodes replayed as a workflow.

Each distinct step name of the trajectory file becomes a node; a synthetic entry node (the
user's opening turn) precedes them. Every node declares every step and ``END`` as possible
successors, so the graph says nothing about which tool follows which: only the predictor's
learning does. A node replays its episode: one LLM call with a short output, a simulated tool
result appended to the transcript, a simulated tool / user think time, then it returns the
episode's next step. A real conversation (:mod:`agentwarm.bench.conversations`) is replayed
with its own messages instead: the entry node adds the opening user turn(s) and calls no
model; every other node calls the model on the real conversation so far (its reply is not
recorded), then adds the real assistant turn, tool results and user turns that followed.

Prompt layouts (:data:`LAYOUTS`):

* ``subagent`` — a specialised subagent per step: ``[shared policy + that step's instructions]
  [that step's tool schema][transcript]``. Nodes share only the policy prefix, so reactive
  caching reuses little when the step changes; prefetching the next subagent's prefix pays.
* ``shared`` — one ReAct agent: ``[policy][all tool schemas][transcript]`` for every node.
  Reactive caching already reuses almost everything; speculation must not cost latency here.

Everything random (generated text, tool results, think times) is a pure function of the seed, the
episode id and the step index, so every mode replays exactly the same episodes. The episodes
and the optional policy / tool files are read by :mod:`agentwarm.bench.inputs`.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentwarm._spec import END, NodeSpec
from agentwarm.bench import prompts
from agentwarm.bench.conversations import add_message, step_turns
from agentwarm.bench.inputs import Episode
from agentwarm.bench.nextturn import NEXT_TURN_KEY, NextTurnEngine
from agentwarm.chat import Message
from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError
from agentwarm.graphs import node
from agentwarm.runtime.prompt import PromptRenderer
from agentwarm.runtime.transcript import Transcript
from agentwarm.runtime.workflow import Workflow, WorkflowGraph

if TYPE_CHECKING:
    from agentwarm.runtime import Context

__all__ = (
    "LAYOUTS",
    "SCRIPT_KEY",
    "EpisodeScript",
    "PromptSizes",
    "ThinkTime",
    "Workload",
)

Layout = Literal["subagent", "shared"]
LAYOUTS: tuple[str, ...] = ("subagent", "shared")
SCRIPT_KEY = "bench_script"
"""Key of the :class:`EpisodeScript` in a run's ``state``."""

_ENTRY = "opening_turn"


_THINK_KINDS: dict[str, tuple[str, ...]] = {
    "const": (),
    "uniform": ("low", "high"),
    "lognormal": ("mean", "sigma"),
}


@dataclass(frozen=True, slots=True)
class ThinkTime:
    """A think-time distribution, parsed from ``const:S``, ``uniform:low=A,high=B`` or
    ``lognormal:mean=M,sigma=S`` (mean ``M`` seconds of the lognormal itself)."""

    kind: str
    params: tuple[tuple[str, float], ...]

    @classmethod
    def parse(cls, spec: str) -> ThinkTime:
        kind, _, rest = spec.strip().partition(":")
        if kind not in _THINK_KINDS:
            raise ConfigError(
                f"think time {spec!r}: unknown distribution {kind!r}; use const:0.5, "
                "uniform:low=0.5,high=2 or lognormal:mean=1.0,sigma=0.5"
            )
        values: dict[str, float] = {}
        try:
            if kind == "const":
                values["value"] = float(rest)
            else:
                for item in filter(None, (x.strip() for x in rest.split(","))):
                    key, _, val = item.partition("=")
                    values[key.strip()] = float(val)
        except ValueError as exc:
            raise ConfigError(f"think time {spec!r}: {exc}") from exc
        need = _THINK_KINDS[kind] or ("value",)
        if sorted(values) != sorted(need):
            raise ConfigError(f"think time {spec!r}: {kind} needs exactly {', '.join(need)}")
        if any(v < 0 or not math.isfinite(v) for v in values.values()):
            raise ConfigError(f"think time {spec!r}: values must be finite and >= 0")
        if kind == "uniform" and values["low"] > values["high"]:
            raise ConfigError(f"think time {spec!r}: low must not exceed high")
        return cls(kind, tuple(sorted(values.items())))

    @property
    def mean(self) -> float:
        p = dict(self.params)
        if self.kind == "const":
            return p["value"]
        if self.kind == "uniform":
            return (p["low"] + p["high"]) / 2
        return p["mean"]

    def sample(self, rng: random.Random) -> float:
        p = dict(self.params)
        if self.kind == "const":
            return p["value"]
        if self.kind == "uniform":
            return rng.uniform(p["low"], p["high"])
        if p["mean"] == 0:
            return 0.0
        sigma = p["sigma"]
        return rng.lognormvariate(math.log(p["mean"]) - sigma * sigma / 2, sigma)

    def __str__(self) -> str:
        p = dict(self.params)
        if self.kind == "const":
            return f"const:{p['value']:g}"
        return f"{self.kind}:" + ",".join(f"{k}={v:g}" for k, v in self.params)


@dataclass(frozen=True, slots=True)
class PromptSizes:
    """Token sizes of the generated prompt parts (ranges are ``(low, high)`` inclusive; each
    step or call draws its size from them deterministically)."""

    policy: int = 1000
    instructions: tuple[int, int] = (300, 600)
    schema: tuple[int, int] = (120, 240)
    opening: tuple[int, int] = (60, 120)
    result: tuple[int, int] = (60, 360)
    output_tokens: int = 12


@dataclass(frozen=True, slots=True)
class EpisodeScript:
    """What the replaying nodes of one run need: the node sequence (entry, steps, ``END``),
    the opening message, one tool result and one think time per node.

    Node ``k`` of the run (``len(ctx.path) == k + 1``) returns ``names[k + 1]``. With
    ``sleep_think=False`` the nodes do not wait out their think time (the caller accounts for
    it): only right when nothing could use the engine meanwhile, i.e. without speculation.

    ``turns`` (a replayed real conversation, else empty) holds per node the real messages it
    adds: node 0 the opening ones (it calls no model), node ``k`` its assistant turn and what
    followed it; ``opening`` and ``results`` are then unused.
    """

    episode: Episode
    names: tuple[str, ...]
    opening: str
    results: tuple[str, ...]
    think_s: tuple[float, ...]
    sleep_think: bool = True
    turns: tuple[tuple[Message, ...], ...] = ()

    def next_after(self, path_len: int) -> str:
        """The true successor of the ``path_len``-th node of the run."""
        if 0 < path_len < len(self.names):
            return self.names[path_len]
        return END


@dataclass
class Workload:
    """Prompts and workflow of a benchmark; build with :meth:`build`.

    ``system`` / ``tools`` map each node to its static prompt head (per :data:`LAYOUTS`);
    ``longest`` is the most steps of any episode it was built for (episodes replayed on its
    workflow must not be longer). ``plain_steps`` are the steps the given tool schemas did not
    cover: replayed without a tool segment. ``turns`` maps the id of each episode that is a
    real conversation to its messages grouped per node (:func:`step_turns`).
    """

    steps: tuple[str, ...]
    entry: str
    layout: str
    seed: int
    sizes: PromptSizes
    think: ThinkTime
    chars_per_token: float
    system: dict[str, str]
    tools: dict[str, tuple[dict[str, Any], ...]]
    longest: int
    plain_steps: tuple[str, ...] = ()
    turns: dict[str, tuple[tuple[Message, ...], ...]] = field(default_factory=dict, repr=False)
    _result_tokens: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        episodes: Sequence[Episode],
        *,
        encode: Callable[[str], list[int]],
        layout: str = "subagent",
        seed: int = 0,
        sizes: PromptSizes | None = None,
        think: ThinkTime | None = None,
        system_text: str | None = None,
        tool_schemas: Sequence[dict[str, Any]] | None = None,
        conversations: Mapping[str, Sequence[Message]] | None = None,
    ) -> Workload:
        """Prompts for the step names of ``episodes``, sized in tokens of ``encode``.

        ``system_text`` replaces the generated policy; ``tool_schemas`` (OpenAI-style, matched
        to steps by ``function.name``) replace the generated schemas; a step none of them names
        is a plain step (no tool segment), listed in ``plain_steps``; in the shared layout every
        node has all of ``tool_schemas``. ``conversations`` maps episode ids to their real
        messages (without the system message), replayed instead of generated text.
        """
        if layout not in LAYOUTS:
            raise ConfigError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        sizes = sizes or PromptSizes()
        steps = tuple(dict.fromkeys(s for e in episodes for s in e.steps))
        if not steps:
            raise ConfigError("the episodes hold no steps")
        entry = _ENTRY
        while entry in steps:
            entry += "_"
        cpt = prompts.chars_per_token(encode, seed)
        policy = (
            system_text if system_text is not None else prompts.policy_text(seed, sizes.policy, cpt)
        )
        schemas = _match_schemas(steps, tool_schemas, seed, sizes, cpt)
        system: dict[str, str] = {}
        tools: dict[str, tuple[dict[str, Any], ...]] = {}
        all_tools = (
            tuple(tool_schemas)
            if tool_schemas is not None
            else tuple(schemas[s] for s in steps if s in schemas)
        )
        for name in (entry, *steps):
            if layout == "shared":
                system[name], tools[name] = policy, all_tools
                continue
            if name == entry:
                rules = prompts.instructions_text(seed, name, sizes.instructions[0], cpt)
                system[name], tools[name] = f"{policy}\n\n{rules}", ()
                continue
            n = prompts.rng_for(seed, "instructions-size", name).randint(*sizes.instructions)
            rules = prompts.instructions_text(seed, name, n, cpt)
            own = (schemas[name],) if name in schemas else ()
            system[name], tools[name] = f"{policy}\n\n{rules}", own
        result_tokens = {
            s: prompts.rng_for(seed, "result-size", s).randint(*sizes.result) for s in steps
        }
        return cls(
            steps=steps,
            entry=entry,
            layout=layout,
            seed=seed,
            sizes=sizes,
            think=think or ThinkTime.parse("const:0"),
            chars_per_token=cpt,
            system=system,
            tools=tools,
            longest=max(len(e.steps) for e in episodes),
            plain_steps=tuple(s for s in steps if s not in schemas),
            turns={k: tuple(step_turns(v)) for k, v in (conversations or {}).items()},
            _result_tokens=result_tokens,
        )

    def specs(self) -> list[NodeSpec]:
        """The replay nodes: the entry node and one node per step, each declaring every step
        and ``END`` as successors."""
        successors = [*self.steps, END]
        return [
            node(
                name=n,
                system=self.system[n],
                tools=list(self.tools[n]),
                next=successors,
                entry=n == self.entry,
                max_tokens=self.sizes.output_tokens,
            )(_replay)
            for n in (self.entry, *self.steps)
        ]

    def workflow(self, name: str = "bench") -> Workflow:
        """The replay workflow of :meth:`specs`."""
        return WorkflowGraph(name).add(*self.specs()).compile(max_steps=self.longest + 1)

    def script(self, episode: Episode) -> EpisodeScript:
        """The deterministic replay script of ``episode``."""
        cpt, seed, sizes = self.chars_per_token, self.seed, self.sizes
        names = (self.entry, *episode.steps, END)
        think_rng = prompts.rng_for(seed, "think", episode.id)
        think = tuple(self.think.sample(think_rng) for _ in range(len(names) - 1))
        if episode.id in self.turns:
            turns = self.turns[episode.id][: len(episode.steps) + 1]
            return EpisodeScript(episode, names, "", ("",) * (len(names) - 1), think, turns=turns)
        open_n = prompts.rng_for(seed, "opening-size", episode.id).randint(*sizes.opening)
        results: list[str] = [""]
        for i, step in enumerate(episode.steps, start=1):
            rng = prompts.rng_for(seed, "result-jitter", episode.id, i)
            n = max(8, round(self._result_tokens[step] * rng.uniform(0.7, 1.3)))
            results.append(prompts.tool_result_text(seed, episode.id, i, step, n, cpt))
        return EpisodeScript(
            episode=episode,
            names=names,
            opening=prompts.opening_text(seed, episode.id, open_n, cpt),
            results=tuple(results),
            think_s=think,
        )

    def describe(self, engine: Engine) -> dict[str, Any]:
        """Token sizes of the static prompt heads (system and tools, as ``engine`` renders
        them for a run's first step), for the report."""
        heads = [len(PromptRenderer(engine, Transcript()).prefix_ids(s)) for s in self.specs()]
        return {
            "layout": self.layout,
            "nodes": len(self.steps) + 1,
            "static_prompt_tokens_min": min(heads),
            "static_prompt_tokens_max": max(heads),
        }


def _match_schemas(
    steps: Sequence[str],
    given: Sequence[dict[str, Any]] | None,
    seed: int,
    sizes: PromptSizes,
    cpt: float,
) -> dict[str, dict[str, Any]]:
    if given is None:
        return {
            s: prompts.tool_schema(
                seed, s, prompts.rng_for(seed, "schema-size", s).randint(*sizes.schema), cpt
            )
            for s in steps
        }
    by_name: dict[str, dict[str, Any]] = {}
    for schema in given:
        fn = schema.get("function") if isinstance(schema, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str):
            by_name[name] = schema
    return {s: by_name[s] for s in steps if s in by_name}


async def _replay(ctx: Context) -> str:
    """Replay one step: LLM call, tool result, think time, then the recorded next step."""
    script: EpisodeScript = ctx.state[SCRIPT_KEY]
    next_turn: NextTurnEngine | None = ctx.state.get(NEXT_TURN_KEY)  # the next_turn mode
    k = len(ctx.path) - 1
    if script.turns:  # a real conversation: the model reads it, the real turns are added
        if k > 0:
            await ctx.llm(record=False)
            if next_turn is not None:  # the recorded assistant turn is the reply here
                next_turn.after_reply(ctx, script.turns[k][0])
        for message in script.turns[k]:
            add_message(ctx, message)
    else:
        await ctx.llm(script.opening if k == 0 else None)
        if next_turn is not None:
            next_turn.after_reply(ctx)
        if script.results[k]:
            ctx.add(script.results[k], role="tool")
    if script.sleep_think and script.think_s[k] > 0:
        await asyncio.sleep(script.think_s[k])
    return script.next_after(len(ctx.path))
