"""``agentwarm gateway``: branch prefetching for agents that already exist.

An OpenAI-compatible ``/v1/chat/completions`` endpoint in front of SGLang, vLLM (or ``agentwarm
serve``) workers. Clients point their ``base_url`` at it; it forwards every request to the
upstream's own chat endpoint unchanged, learns the agent graph from the traffic (a node is a
request's head: its system messages and tools; a session is one agent run) and, while a step
runs, prefills the likely next requests of the session into the upstream's prefix cache.
"""
