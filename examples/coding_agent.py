"""A coding agent: plan, then loop over search / read / edit / test until the tests pass.

    agentwarm run examples/coding_agent.py --runs 10

The loop is what makes prediction worthwhile: after ``read`` comes ``edit`` most of the time,
after ``test`` comes ``edit`` (tests failed) or ``done``. The simulated repository decides how
many rounds a task takes, so runs differ but follow learnable patterns.
"""

from __future__ import annotations

import zlib

from _common import keyword, route, tool, tool_call

from agentwarm import END, Context, node

WORKFLOW_NAME = "coding_agent"

INPUTS = [
    "Fix the off-by-one error in pagination.py: the last page is never shown.",
    "Add a --verbose flag to the CLI that prints every HTTP request.",
    "The date parser crashes on ISO week dates like 2026-W48-1; handle them.",
    "Rename the config key 'timeout' to 'request_timeout' and keep the old one working.",
    "Make the cache thread-safe; two workers sometimes corrupt the index.",
    "Speed up the CSV export: it is quadratic in the number of rows.",
]

_AGENT_RULES = """
You are a careful senior software engineer working in a Python repository through tools.
Rules: read before you edit; make the smallest change that fixes the problem; keep the public API
stable unless the task says otherwise; every change must keep or add a test; run the test suite
after each edit; never edit generated files, lock files or vendored code; explain each step in
one sentence before the tool call. The repository uses pytest, ruff and mypy; style is PEP 8 with
100-column lines; type hints everywhere; no print debugging left behind. When a test fails, read
its output and the code it exercises before editing again. Stop when the suite passes and the
task is done, and summarise the change in three lines for the pull request description.
"""

PLAN_PROMPT = (
    """Break the task into at most four steps. Name the files you expect to touch and the tests
that prove the fix. Then choose the first tool: 'search' when you do not know where the code is,
'read' when the task names the file."""
    + _AGENT_RULES
)
SEARCH_PROMPT = (
    "Search the repository for the symbols and strings the task mentions." + _AGENT_RULES
)
READ_PROMPT = "Read the most relevant file region and decide what to change." + _AGENT_RULES
EDIT_PROMPT = "Write a minimal patch as a unified diff." + _AGENT_RULES
TEST_PROMPT = "Run the test suite and interpret the result." + _AGENT_RULES
DONE_PROMPT = "Summarise the change for the pull request in three lines." + _AGENT_RULES

GREP = tool(
    "grep", "Search files for a regex.", pattern=("string", "Regex"), path=("string", "Dir")
)
READ_FILE = tool(
    "read_file",
    "Read lines of a file.",
    path=("string", "File path"),
    start=("integer", "First line"),
    end=("integer", "Last line"),
)
APPLY_PATCH = tool("apply_patch", "Apply a unified diff.", diff=("string", "Unified diff"))
RUN_TESTS = tool("run_tests", "Run pytest and return its summary.", args=("string", "pytest args"))


def _difficulty(task: str) -> int:
    """Edit/test rounds the simulated repository needs for ``task`` (1-3), deterministic."""
    return 1 + zlib.crc32(task.encode()) % 3


@node(entry=True, system=PLAN_PROMPT, next=["search", "read"])
async def plan(ctx: Context) -> str:
    reply = await ctx.llm(ctx.input, max_tokens=32)
    ctx.state["rounds_left"] = _difficulty(ctx.input)
    names_file = keyword(ctx.input, [((".py", "cli", "config"), "read")], "search")
    return route(reply.text, ["search", "read"], names_file)


@node(system=SEARCH_PROMPT, tools=[GREP], next=["read"])
async def search(ctx: Context) -> str:
    await ctx.llm(max_tokens=16)
    await tool_call()
    ctx.add("src/app/pagination.py:41: def last_page(total, size):")
    return "read"


@node(system=READ_PROMPT, tools=[READ_FILE], next=["edit", "search"])
async def read(ctx: Context) -> str:
    reply = await ctx.llm(max_tokens=16)
    await tool_call()
    ctx.add("41 def last_page(total, size):\n42     return total // size")
    return route(reply.text, ["edit", "search"], "edit")


@node(system=EDIT_PROMPT, tools=[APPLY_PATCH], next=["test"])
async def edit(ctx: Context) -> str:
    await ctx.llm(max_tokens=32)
    await tool_call()
    ctx.add("patch applied: 1 file changed, 2 insertions(+), 1 deletion(-)")
    return "test"


@node(system=TEST_PROMPT, tools=[RUN_TESTS], next=["edit", "read", "done"])
async def test(ctx: Context) -> str:
    reply = await ctx.llm(max_tokens=16)
    await tool_call()
    ctx.state["rounds_left"] -= 1
    if ctx.state["rounds_left"] > 0:
        ctx.add("FAILED tests/test_pagination.py::test_last_page - assert 3 == 4")
        return route(reply.text, ["edit", "read"], "edit")
    ctx.add("42 passed in 0.81s")
    return "done"


@node(system=DONE_PROMPT, next=[END])
async def done(ctx: Context) -> str:
    await ctx.llm(max_tokens=32)
    return END
