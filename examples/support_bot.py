"""A customer-support agent: triage routes to billing, tech, refund or escalation specialists.

Run it (tiny random-weight model, embedded engine)::

    agentwarm run examples/support_bot.py --runs 20

Each specialist has its own long system prompt and tool schemas: exactly the part of the next
step's prompt that agentwarm can prefill while triage is still running.
"""

from __future__ import annotations

from _common import keyword, route, tool, tool_call

from agentwarm import END, Context, node

WORKFLOW_NAME = "support_bot"

#: Inputs used by ``agentwarm run`` when no ``--input`` is given (one per run, cycling).
INPUTS = [
    "I was charged twice for my subscription this month, please fix the invoice.",
    "The app crashes with error 0x80040154 every time I open the settings page.",
    "My order arrived broken, I want my money back.",
    "My invoice shows the wrong VAT number and the billing address is outdated.",
    "I cannot log in since the last update, the password reset email never arrives.",
    "The blender I bought stopped working after two days, refund please.",
    "This is the third time I write and nobody answers, I want to talk to a manager now!",
    "Why was my card charged 49.99 when my plan costs 29.99?",
    "Sync between my phone and laptop has been broken since Tuesday, error code 503.",
    "Please refund order 4471, the size was wrong and I already sent it back.",
    "How do I download a receipt for my annual plan? I need it for my expense report.",
    "The desktop app is stuck on 'syncing' forever after I changed my password.",
    "I returned the office chair two weeks ago and still have not received a refund.",
    "You charged me after I cancelled the Team plan, I want that invoice corrected.",
    "Export to PDF produces blank pages since version 4.2.0 on macOS.",
    "The lamp arrived with a cracked shade, can I get a refund instead of a replacement?",
    "I have written four times about a data breach notice and I want a manager immediately.",
    "Please switch my billing from monthly to annual and apply the discount.",
    "Notifications stopped working on Android 15 after the latest update.",
    "The wrong colour was delivered for order 5520, I want my money back.",
]

_HOUSE_RULES = """
General rules for every support specialist of Northwind Home & Office:
- Greet the customer once, by name when known, and keep a calm, plain tone. Never blame them.
- Verify identity before disclosing or changing account data: the account email plus either the
  postcode on file or the last four digits of the payment card. Never read out full card
  numbers, passwords or one-time codes, and never ask the customer for a password.
- One action at a time. Before any change that affects money or data (refunds, plan changes,
  address edits, account deletion) state exactly what you will do and get an explicit "yes".
- Use the tools instead of guessing. If a tool fails twice, apologise, log a ticket with
  create_ticket and tell the customer when they will hear back (within one business day).
- Company policy wins over customer demands. Do not promise what policy does not allow;
  explain what you can do instead.
- Keep replies short: at most five sentences, no marketing language, no internal jargon.
- Hand over to a human (escalate) when the customer asks for one twice, threatens legal
  action, reports a safety issue, or when the issue is outside your specialty.
"""

TRIAGE_PROMPT = (
    """You are the triage agent of Northwind Home & Office customer support. Read the customer's
first message and decide which specialist handles it. Answer with exactly one word:
billing   - invoices, charges, payment methods, plans, VAT, receipts, double charges;
tech      - crashes, errors, login problems, sync, installation, performance, bugs;
refund    - returns, damaged or wrong items, refund status, cancellations with money back;
escalate  - angry customers asking for a manager, legal threats, safety issues, anything the
            others cannot handle.
When a message mixes topics, pick the one the customer needs resolved first. Do not answer the
customer yourself; do not add punctuation or explanations."""
    + _HOUSE_RULES
)

BILLING_PROMPT = (
    """You are the billing specialist. You can look up accounts, invoices and payments, correct
invoice details and issue credits up to 50.00 EUR without approval. Larger credits, chargebacks
and disputes with banks go to escalation. Explain every charge with its date, amount and plan.
Prices: Basic 9.99/month, Plus 29.99/month, Team 49.99/month per 5 seats; annual plans get two
months free. VAT is added according to the billing address; business customers with a valid VAT
number are invoiced without VAT (reverse charge). A double charge is refunded as a credit to the
original payment method within 5-7 business days."""
    + _HOUSE_RULES
)

TECH_PROMPT = (
    """You are the technical support specialist for the Northwind apps (desktop, iOS, Android,
web). Diagnose before prescribing: ask for the platform, app version and the exact error text
when they are missing, and search the knowledge base before suggesting a fix. Known issues:
error 0x80040154 (settings crash, fixed in 4.2.1), 503 during sync (server incident or expired
session: sign out and in), missing password-reset emails (check spam, whitelist
no-reply@northwind.example, resend after 10 minutes). Never ask for remote access. If a bug is
new, collect steps to reproduce and create a ticket for engineering."""
    + _HOUSE_RULES
)

REFUND_PROMPT = (
    """You are the refunds specialist. Orders can be returned within 30 days of delivery if
unused; damaged or wrong items are refunded at any time within the warranty (2 years) after a
photo is received. Refunds go to the original payment method; store credit only if the customer
asks. Look up the order before answering, confirm the items and the amount, and ask for an
explicit yes before issuing a refund. Shipping costs are refunded only when the item was damaged
or wrong. Refunds above 500.00 EUR need escalation."""
    + _HOUSE_RULES
)

ESCALATE_PROMPT = (
    """You are the escalation desk. Summarise the case for a human supervisor in at most six
bullet points: customer, issue, what was tried, what the customer wants, urgency, and any legal
or safety aspect. Then tell the customer, in two sentences, that a supervisor will contact them
and when."""
    + _HOUSE_RULES
)

RESOLVE_PROMPT = (
    """You close support conversations. Summarise what was done in one sentence, ask whether
anything else is needed, and thank the customer. Record the resolution code: BILLING_FIXED,
TECH_FIXED, REFUND_ISSUED or OTHER."""
    + _HOUSE_RULES
)

LOOKUP_ACCOUNT = tool(
    "lookup_account",
    "Find a customer account and its recent invoices and payments.",
    email=("string", "Account email address"),
    postcode=("string", "Postcode on file, for verification"),
)
ADJUST_INVOICE = tool(
    "adjust_invoice",
    "Correct an invoice's VAT number or billing address, or add a credit up to 50.00 EUR.",
    invoice_id=("string", "Invoice id such as INV-2024-000123"),
    change=("string", "What to change, e.g. 'credit 20.00' or 'vat DE123456789'"),
)
SEARCH_KB = tool(
    "search_kb",
    "Search the technical knowledge base for articles matching an error or symptom.",
    query=("string", "Error text or symptom"),
    platform=("string", "desktop | ios | android | web"),
)
CREATE_TICKET = tool(
    "create_ticket",
    "Create a ticket for a human team.",
    team=("string", "billing | engineering | refunds | supervisors"),
    summary=("string", "One-paragraph summary"),
)
LOOKUP_ORDER = tool(
    "lookup_order",
    "Get an order's items, delivery date, amount paid and return status.",
    order_id=("string", "Order number"),
)
ISSUE_REFUND = tool(
    "issue_refund",
    "Refund items of an order to the original payment method.",
    order_id=("string", "Order number"),
    amount=("number", "Amount in EUR"),
)


@node(entry=True, system=TRIAGE_PROMPT, next=["billing", "tech", "refund", "escalate"])
async def triage(ctx: Context) -> str:
    reply = await ctx.llm(ctx.input, max_tokens=4)
    fallback = keyword(
        ctx.input,
        [
            (("manager", "lawyer", "third time", "nobody answers"), "escalate"),
            (("refund", "money back", "broken", "return"), "refund"),
            (("charged", "invoice", "vat", "billing", "plan costs"), "billing"),
        ],
        "tech",
    )
    return route(reply.text, ["billing", "tech", "refund", "escalate"], fallback)


@node(
    system=BILLING_PROMPT,
    tools=[LOOKUP_ACCOUNT, ADJUST_INVOICE, CREATE_TICKET],
    next=["lookup_account", "resolve", "escalate"],
)
async def billing(ctx: Context) -> str:
    reply = await ctx.llm(max_tokens=24)
    if not ctx.state.get("account_checked"):
        return "lookup_account"
    return route(reply.text, ["resolve", "escalate"], "resolve")


@node(system=BILLING_PROMPT, tools=[LOOKUP_ACCOUNT], next=["billing"])
async def lookup_account(ctx: Context) -> str:
    await ctx.llm("Call lookup_account for the customer.", max_tokens=16)
    await tool_call()
    ctx.add('{"account": "ACME-2291", "plan": "Plus", "invoices": ["INV-2024-000123"]}')
    ctx.state["account_checked"] = True
    return "billing"


@node(
    system=TECH_PROMPT, tools=[SEARCH_KB, CREATE_TICKET], next=["search_kb", "resolve", "escalate"]
)
async def tech(ctx: Context) -> str:
    reply = await ctx.llm(max_tokens=24)
    if not ctx.state.get("kb_searched"):
        return "search_kb"
    return route(reply.text, ["resolve", "escalate"], "resolve")


@node(system=TECH_PROMPT, tools=[SEARCH_KB], next=["tech"])
async def search_kb(ctx: Context) -> str:
    await ctx.llm("Search the knowledge base.", max_tokens=16)
    await tool_call()
    ctx.add('{"articles": [{"id": "KB-311", "title": "Settings crash 0x80040154"}]}')
    ctx.state["kb_searched"] = True
    return "tech"


@node(
    system=REFUND_PROMPT,
    tools=[LOOKUP_ORDER, ISSUE_REFUND, CREATE_TICKET],
    next=["lookup_order", "resolve", "escalate"],
)
async def refund(ctx: Context) -> str:
    reply = await ctx.llm(max_tokens=24)
    if not ctx.state.get("order_checked"):
        return "lookup_order"
    return route(reply.text, ["resolve", "escalate"], "resolve")


@node(system=REFUND_PROMPT, tools=[LOOKUP_ORDER], next=["refund"])
async def lookup_order(ctx: Context) -> str:
    await ctx.llm("Call lookup_order.", max_tokens=16)
    await tool_call()
    ctx.add('{"order": "4471", "items": ["blender"], "paid": 89.0, "delivered": "2026-11-20"}')
    ctx.state["order_checked"] = True
    return "refund"


@node(system=ESCALATE_PROMPT, tools=[CREATE_TICKET], next=[END])
async def escalate(ctx: Context) -> str:
    await ctx.llm(max_tokens=32)
    return END


@node(system=RESOLVE_PROMPT, next=[END])
async def resolve(ctx: Context) -> str:
    await ctx.llm(max_tokens=24)
    return END
