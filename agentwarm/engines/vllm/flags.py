"""What a vLLM server was started without, as one :class:`~agentwarm.engines.vllm.VLLMEngine`
finds out from its answers, each said in one warning naming the flag:

* ``--enable-prompt-tokens-details``: ``usage`` has no cached prompt tokens; they count as 0.
* ``--scheduling-policy priority``: the server refuses ``priority``; none is sent from then on
  (speculative prefills then compete with live requests).

It also adds up the ``usage`` of the client's prefills as the server counts them
(:attr:`ServerFlags.prefill_prompt_tokens`: each chunk of a chunked prefill whole), so that the
server's counters less them are the traffic that is not warming (keep-warm's live hit rate).
"""

from __future__ import annotations

import logging

from agentwarm.engines.vllm.protocol import Usage

__all__ = ("PROMPT_DETAILS_FLAG", "ServerFlags")

log = logging.getLogger("agentwarm.engines.vllm.client")  # the engine's own log

PROMPT_DETAILS_FLAG = "--enable-prompt-tokens-details"


class ServerFlags:
    """The server at ``url``'s flags as far as its answers tell (module docstring)."""

    def __init__(self, url: str, *, send_priority: bool = True) -> None:
        self.url = url
        #: Whether requests carry ``priority`` (until the server refuses it).
        self.send_priority = send_priority
        #: The prompt tokens of this client's finished prefill requests (every chunk), as the
        #: server counted them, and of those, the cached ones.
        self.prefill_prompt_tokens = 0
        self.prefill_cached_tokens = 0
        self._warned_details = False

    def count(self, usage: Usage, *, prefill: bool = False) -> int:
        """A finished request's cached prompt tokens, 0 (and one warning) when its ``usage``
        reports none; a ``prefill``'s usage is added to the prefill totals."""
        cached = usage.cached_tokens
        if prefill:
            self.prefill_prompt_tokens += usage.prompt_tokens
            self.prefill_cached_tokens += cached or 0
        if cached is not None:
            return cached
        if not self._warned_details:
            self._warned_details = True
            log.warning(
                "%s reports no cached prompt tokens: start vLLM with %s (cached_tokens count as "
                "0 until then)",
                self.url,
                PROMPT_DETAILS_FLAG,
            )
        return 0

    def refuse_priority(self) -> bool:
        """The server refused ``priority``: stop sending it (one warning). False when it was
        not being sent (the refusal is something else)."""
        if not self.send_priority:
            return False
        self.send_priority = False
        log.warning(
            "%s refuses request priorities (start vLLM with --scheduling-policy priority); "
            "sending none from now on, so speculative prefills compete with live requests",
            self.url,
        )
        return True
