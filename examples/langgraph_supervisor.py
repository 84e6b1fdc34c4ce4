"""An airline support team in LangGraph: a supervisor routes each customer to one of three
specialists (reservations, baggage, refunds), each with its own system prompt and tools.

    python examples/langgraph_supervisor.py --base-url http://127.0.0.1:30000/v1 --runs 3

Any OpenAI-compatible endpoint works: ``agentwarm serve --model tiny``, ``agentwarm gateway``,
SGLang or vLLM. The agent code is plain LangGraph and ``langchain-openai``; pointing it at
agentwarm changes only ``ChatOpenAI(base_url=...)``, plus, optionally (``--session-header``),
an ``X-Agentwarm-Session`` header naming the run.

The graph follows LangGraph's supervisor pattern: the supervisor's only tools are
``transfer_to_<specialist>`` handoffs (a tool that returns ``Command(goto=<specialist>)``); a
specialist loops model -> tools -> model until it answers, then the supervisor sees the whole
conversation and replies to the customer. Every agent sends its own system prompt and tools
with the shared conversation, so each request starts with a prefix that agent sent before.

STAND-IN POLICY (read this first). ``agentwarm serve --model tiny`` has random weights: its
replies are noise, not usable tool calls. Every step still sends its real request through
``ChatOpenAI`` (the agent's system prompt, the conversation so far, its tools via ``bind_tools``).
If the reply holds no valid tool call (a bound tool with its required arguments),
:class:`StandInPolicy` decides instead, deterministically from the conversation: the supervisor
transfers by keywords, a specialist calls its tools in a fixed order, then answers (keeping the
model's own text). That decision is the ``AIMessage`` the graph acts on, so the next request
carries the tool call and the tool's result, as a real run's would. With a real checkpoint the
model's valid calls win and the policy goes unused; the ``by`` column says who decided a step.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
import openai
from langchain_core.messages import AIMessage, AnyMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from pydantic import SecretStr

#: The request header that names an agent run for ``agentwarm gateway`` (optional).
SESSION_HEADER = "X-Agentwarm-Session"

#: Customer messages, one per run (cycling).
INPUTS = [
    "Hi, please move booking QX7K2P to 2026-03-14, same route, any time of day.",
    "My suitcase with tag SK482913 never arrived in Lisbon. Booking ZR4M8T.",
    "Booking PL9D3W was cancelled by you two days ago and I want my money back.",
    "I'd like to change booking HM2V6C to 2026-04-02 and keep my window seat.",
    "The bag with tag SK100257 came back with a broken handle, booking TT5N1Q.",
    "Please refund booking BD8R4K, I was charged twice for the same flight.",
]

_HOUSE_RULES = """
You work in customer support for Skylark Airways. Rules for every agent on the team:
- Confirm the booking code before you look anything up or change anything, and read back the
  passenger's name from the booking, never from the chat.
- Use the tools for facts (fares, flight times, bag locations, refund amounts); do not estimate.
- Before any change that costs or returns money, state the amount and wait for a clear "yes".
- Passengers may not be rebooked onto a flight that departs within 3 hours.
- Keep answers under five sentences, in plain words, without internal codes or jargon.
- If a request is outside your role, say so and hand it back instead of improvising.
"""

SUPERVISOR_PROMPT = (
    "You are the supervisor of the support team. Read the customer's message and transfer it "
    "to exactly one specialist with a transfer tool: reservations for new bookings, date and "
    "seat changes; baggage for delayed, lost or damaged bags; refunds for cancellations, "
    "double charges and money back. When the specialist has answered, reply to the customer "
    "with a short summary and end the conversation. Never answer a request yourself before a "
    "specialist has handled it." + _HOUSE_RULES
)
RESERVATIONS_PROMPT = (
    "You are the reservations specialist. You look up bookings and move them to another date "
    "on the same route. Quote the fare difference from the tool before confirming a change; a "
    "change to a cheaper fare gives no refund, only travel credit." + _HOUSE_RULES
)
BAGGAGE_PROMPT = (
    "You are the baggage specialist. You trace checked bags by their tag number and open "
    "claims for bags that are delayed over 24 hours or damaged. Tell the customer the bag's "
    "last scanned location and the claim reference, and that delivery to their address is "
    "free." + _HOUSE_RULES
)
REFUNDS_PROMPT = (
    "You are the refunds specialist. You check whether a booking is refundable, quote the "
    "amount from the tool and issue the refund to the original payment method. Cancellations "
    "by the airline and duplicate charges are always refunded in full." + _HOUSE_RULES
)


def _code(text: str, pattern: str, default: str) -> str:
    match = re.search(pattern, text)
    return match.group(0) if match else default


@tool
def find_booking(booking_code: str) -> str:
    """Look up a booking by its six-character code: passenger, flights, fare, status."""
    status = "cancelled by airline" if booking_code.startswith("PL") else "confirmed"
    flight = {"flight": "SK214", "from": "LHR", "to": "LIS", "date": "2026-03-09"}
    fields = {"passenger": "Dana Whitfield", "flights": [flight], "paid_eur": 212.4}
    return json.dumps({"booking_code": booking_code, **fields, "status": status})


@tool
def change_flight(booking_code: str, new_date: str) -> str:
    """Move a booking to another date on the same route; returns the fare difference."""
    return json.dumps(
        {"booking_code": booking_code, "new_date": new_date, "flight": "SK218", "diff_eur": 35.0}
    )


@tool
def track_bag(bag_tag: str) -> str:
    """Trace a checked bag by its tag number: last scan, location, status."""
    return json.dumps(
        {"bag_tag": bag_tag, "last_scan": "2026-03-09T18:42Z", "location": "LHR T5 transfer"}
    )


@tool
def open_claim(bag_tag: str, reason: str) -> str:
    """Open a baggage claim (reason: delayed or damaged); returns the claim reference."""
    return json.dumps({"claim": f"CLM-{bag_tag[-4:]}", "bag_tag": bag_tag, "reason": reason})


@tool
def refund_quote(booking_code: str) -> str:
    """Whether a booking is refundable, and the amount."""
    return json.dumps({"booking_code": booking_code, "refundable": True, "amount_eur": 212.40})


@tool
def issue_refund(booking_code: str, amount_eur: float) -> str:
    """Refund an amount to the booking's original payment method."""
    return json.dumps({"booking_code": booking_code, "amount_eur": amount_eur, "working_days": 5})


def handoff(agent: str) -> BaseTool:
    """``transfer_to_<agent>``: a tool whose result moves the graph to ``agent``."""

    @tool(f"transfer_to_{agent}", description=f"Transfer the customer to the {agent} specialist.")
    def transfer(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
        note = ToolMessage(f"Transferred to {agent}.", tool_call_id=tool_call_id)
        return Command(goto=agent, update={"messages": [note]})

    return transfer


def _quoted(results: Sequence[ToolMessage]) -> float:
    """The ``amount_eur`` of the latest tool result that has one (0.0 if none)."""
    for message in reversed(results):
        try:
            return float(json.loads(str(message.content))["amount_eur"])
        except (ValueError, KeyError, TypeError):
            continue  # not a quote (or a tool error's text)
    return 0.0


@dataclass(frozen=True)
class Agent:
    """One member of the team: its name (the graph node), system prompt and tools."""

    name: str
    prompt: str
    tools: list[BaseTool]


SPECIALISTS = [
    Agent("reservations", RESERVATIONS_PROMPT, [find_booking, change_flight]),
    Agent("baggage", BAGGAGE_PROMPT, [track_bag, open_claim]),
    Agent("refunds", REFUNDS_PROMPT, [find_booking, refund_quote, issue_refund]),
]
SUPERVISOR = Agent("supervisor", SUPERVISOR_PROMPT, [handoff(a.name) for a in SPECIALISTS])


class StandInPolicy:
    """The decisions a competent model would take, for replies that make no valid tool call
    (see the module docstring). Deterministic: a function of the conversation only."""

    #: (keywords, specialist), first match wins; reservations otherwise.
    ROUTES = (
        (("bag", "suitcase", "luggage"), "baggage"),
        (("refund", "money back", "charged twice"), "refunds"),
    )

    def decide(self, agent: str, messages: Sequence[AnyMessage]) -> dict[str, Any] | None:
        """The tool call ``agent`` makes next (``{"name", "args"}``), None to answer."""
        customer = str(messages[0].content)
        if agent == "supervisor":
            if any(isinstance(m, ToolMessage) for m in messages):
                return None  # a specialist has handled it
            low = customer.lower()
            matches = (name for words, name in self.ROUTES if any(w in low for w in words))
            target = next(matches, "reservations")
            return {"name": f"transfer_to_{target}", "args": {}}
        results = [m for m in messages if isinstance(m, ToolMessage)][1:]  # after the handoff
        plan = self.plan(agent, customer, results)
        return plan[len(results)] if len(results) < len(plan) else None

    def plan(
        self, agent: str, customer: str, results: Sequence[ToolMessage]
    ) -> list[dict[str, Any]]:
        """``agent``'s tool calls for this customer; later ones may use earlier ``results``."""
        booking = {"booking_code": _code(customer, r"\b[A-Z]{2}\d[A-Z0-9]{3}\b", "UNKNWN")}
        tag = _code(customer, r"\bSK\d{6}\b", "SK000000")
        if agent == "reservations":
            date = _code(customer, r"\d{4}-\d{2}-\d{2}", "2026-01-01")
            change = {**booking, "new_date": date}
            return [
                {"name": "find_booking", "args": booking},
                {"name": "change_flight", "args": change},
            ]
        if agent == "baggage":
            reason = "damaged" if "broken" in customer or "damaged" in customer else "delayed"
            return [
                {"name": "track_bag", "args": {"bag_tag": tag}},
                {"name": "open_claim", "args": {"bag_tag": tag, "reason": reason}},
            ]
        return [
            {"name": "find_booking", "args": booking},
            {"name": "refund_quote", "args": booking},
            {"name": "issue_refund", "args": {**booking, "amount_eur": _quoted(results)}},
        ]


@dataclass(frozen=True)
class Step:
    """One LLM request: the task (run) index, the agent that sent it, the tool it called
    (``-``: it answered), the usage the server reported, and who decided (model or policy)."""

    task: int
    agent: str
    tool: str
    prompt_tokens: int
    cached_tokens: int
    by: str


class AgentNode:
    """The graph node of ``agent``: one chat request with its prompt, the conversation and its
    tools, then the decision (the model's valid tool calls, else the policy's) as the new
    AIMessage, reported to ``record(agent, message, by)``."""

    def __init__(
        self,
        agent: Agent,
        llm: ChatOpenAI,
        policy: StandInPolicy,
        record: Callable[[str, AIMessage, str], None],
    ) -> None:
        self.agent, self.policy, self.record = agent, policy, record
        self.model = llm.bind_tools(agent.tools)
        self.required = {
            t.name: set(convert_to_openai_tool(t)["function"]["parameters"].get("required", []))
            for t in agent.tools
        }

    def __call__(self, state: MessagesState) -> dict[str, list[AnyMessage]]:
        name = self.agent.name
        reply = self.model.invoke([SystemMessage(self.agent.prompt), *state["messages"]])
        assert isinstance(reply, AIMessage)
        by = "model"
        if not self.valid(reply):
            by = "policy"
            choice = self.policy.decide(name, state["messages"])
            calls = [] if choice is None else [{**choice, "id": f"call_{uuid.uuid4().hex[:24]}"}]
            reply = AIMessage(
                content="" if calls else reply.content,
                tool_calls=calls,
                id=reply.id,
                usage_metadata=reply.usage_metadata,
                response_metadata=reply.response_metadata,
            )
        reply.name = name
        self.record(name, reply, by)
        return {"messages": [reply]}

    def valid(self, reply: AIMessage) -> bool:
        """Whether the reply calls bound tools only, each with its required arguments."""
        return bool(reply.tool_calls) and all(
            call["name"] in self.required and self.required[call["name"]] <= call["args"].keys()
            for call in reply.tool_calls
        )


def build_team(llm: ChatOpenAI, record: Callable[[str, AIMessage, str], None]) -> Any:
    """The compiled graph: supervisor -> handoff -> specialist <-> its tools -> supervisor."""
    policy = StandInPolicy()
    graph = StateGraph(MessagesState)
    for agent in (SUPERVISOR, *SPECIALISTS):
        after = END if agent is SUPERVISOR else SUPERVISOR.name
        graph.add_node(agent.name, AgentNode(agent, llm, policy, record))
        graph.add_node(f"{agent.name}_tools", ToolNode(agent.tools))
        paths: dict[Hashable, str] = {"tools": f"{agent.name}_tools", END: after}
        graph.add_conditional_edges(agent.name, tools_condition, paths)
        if agent is not SUPERVISOR:  # the supervisor's tools route with Command(goto=...)
            graph.add_edge(f"{agent.name}_tools", agent.name)
    graph.add_edge(START, SUPERVISOR.name)
    return graph.compile()


def run_tasks(
    base_url: str,
    runs: int,
    *,
    model: str = "tiny",
    api_key: str = "none",
    max_tokens: int = 16,
    session_header: bool = False,
    http_client: httpx.Client | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> list[Step]:
    """Run ``runs`` customer tasks (``INPUTS``, cycling); one :class:`Step` per LLM request."""
    steps: list[Step] = []
    for task in range(runs):
        headers = {SESSION_HEADER: f"airline-{uuid.uuid4().hex[:12]}"} if session_header else None
        llm = ChatOpenAI(
            base_url=base_url,
            api_key=SecretStr(api_key),
            model=model,
            max_completion_tokens=max_tokens,
            temperature=0,
            default_headers=headers,
            http_client=http_client,
        )

        def record(agent: str, reply: AIMessage, by: str, task: int = task) -> None:
            usage: dict[str, Any] = dict(reply.usage_metadata or {"input_tokens": 0})
            cached = (usage.get("input_token_details") or {}).get("cache_read", 0)
            tool_name = ",".join(c["name"] for c in reply.tool_calls) or "-"
            step = Step(task, agent, tool_name, usage["input_tokens"], cached or 0, by)
            steps.append(step)
            if on_step is not None:
                on_step(step)

        build_team(llm, record).invoke({"messages": [("user", INPUTS[task % len(INPUTS)])]})
    return steps


def _print_step(step: Step) -> None:
    print(
        f"task {step.task}  {step.agent:<12} {step.tool:<24} prompt_tokens={step.prompt_tokens:<5}"
        f" cached_tokens={step.cached_tokens:<5} by={step.by}"
    )


def main(argv: Sequence[str] | None = None, *, http_client: httpx.Client | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible URL, e.g. .../v1")
    parser.add_argument("--runs", type=int, default=3, help="customer tasks to run (default 3)")
    parser.add_argument("--model", default="tiny", help="model name sent in each request")
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--session-header", action="store_true", help=f"send {SESSION_HEADER}: <run id>"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.max_tokens < 1:
        parser.error("--runs and --max-tokens must be at least 1")
    start = time.perf_counter()
    try:
        steps = run_tasks(
            args.base_url,
            args.runs,
            model=args.model,
            api_key=args.api_key,
            max_tokens=args.max_tokens,
            session_header=args.session_header,
            http_client=http_client,
            on_step=_print_step,
        )
    except openai.APIConnectionError as exc:
        print(f"error: cannot reach {args.base_url} ({exc}); start a server there", file=sys.stderr)
        return 1
    except openai.NotFoundError:
        hint = "the base URL of an OpenAI-compatible server usually ends in /v1"
        print(f"error: {args.base_url}/chat/completions is not found; {hint}", file=sys.stderr)
        return 1
    prompt = sum(s.prompt_tokens for s in steps)
    cached = sum(s.cached_tokens for s in steps)
    print(
        f"{args.runs} tasks, {len(steps)} requests, {prompt} prompt tokens, {cached} cached "
        f"({cached / max(prompt, 1):.0%}), {time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
