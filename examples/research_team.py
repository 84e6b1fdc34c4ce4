"""A research team: a lead fans out to three researchers in parallel, a writer joins them.

    agentwarm run examples/research_team.py --runs 5

Fan-out is where prefetching pays twice: while the lead plans, all three researchers' prompts
are warmed; the writer's prompt is warmed while the researchers work.
"""

from __future__ import annotations

from _common import keyword, tool, tool_call

from agentwarm import END, Context, node

WORKFLOW_NAME = "research_team"

INPUTS = [
    "Compare the energy efficiency of heat pumps and gas boilers in cold climates.",
    "What changed in EU battery regulation between 2023 and 2026?",
    "Summarise the evidence on four-day work weeks and productivity.",
    "How do municipal broadband networks affect prices and coverage?",
]

_TEAM_RULES = """
Team rules: cite every factual claim with a source id from the tools; prefer primary sources
(statistics offices, regulators, peer-reviewed studies) over news; give numbers with units and
the year they refer to; flag disagreements between sources instead of averaging them; keep notes
in bullet points of at most 25 words; never invent a citation; say 'unknown' when the sources do
not answer. The final report has: a two-sentence answer, key findings, open questions, sources.
"""

LEAD_PROMPT = (
    "You lead a research team. Split the question into three angles: data, policy and "
    "critique. Write one instruction per researcher." + _TEAM_RULES
)
RESEARCH_PROMPTS = {
    "data": "You are the data researcher: find quantitative evidence." + _TEAM_RULES,
    "policy": "You are the policy researcher: find laws, rules and official positions."
    + _TEAM_RULES,
    "critique": "You are the critical reviewer: find counter-evidence and limitations."
    + _TEAM_RULES,
}
WRITER_PROMPT = "You are the writer: merge the researchers' notes into the report." + _TEAM_RULES
FACTCHECK_PROMPT = "You check the report's numbers against the notes." + _TEAM_RULES

WEB_SEARCH = tool("web_search", "Search the web.", query=("string", "Query"))
FETCH = tool("fetch_source", "Fetch a source by id.", source_id=("string", "Source id"))


@node(entry=True, system=LEAD_PROMPT, next=["data", "policy", "critique"])
async def lead(ctx: Context) -> list[str]:
    await ctx.llm(ctx.input, max_tokens=48)
    return ["data", "policy", "critique"]


def _researcher(name: str):
    @node(name=name, system=RESEARCH_PROMPTS[name], tools=[WEB_SEARCH, FETCH], next=["writer"])
    async def research(ctx: Context) -> str:
        await ctx.llm(f"Research the {name} angle.", max_tokens=32)
        await tool_call()
        ctx.add(f"[{name}] 3 sources found: S1, S2, S3")
        return "writer"

    return research


data = _researcher("data")
policy = _researcher("policy")
critique = _researcher("critique")


@node(system=WRITER_PROMPT, join=True, next=["factcheck", END])
async def writer(ctx: Context) -> str:
    await ctx.llm("Write the report.", max_tokens=64)
    numeric = keyword(ctx.input, [(("compare", "efficiency", "prices", "productivity"), "y")], "n")
    return "factcheck" if numeric == "y" else END


@node(system=FACTCHECK_PROMPT, next=[END])
async def factcheck(ctx: Context) -> str:
    await ctx.llm(max_tokens=16)
    return END
