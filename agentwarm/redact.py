"""Keep credentials out of messages: every error, log line or report that shows an engine URL
shows it through :func:`redact_credentials`."""

from __future__ import annotations

import re

__all__ = ("redact_credentials",)

# scheme://userinfo@ — userinfo stops at the first "/" or whitespace and runs to the last "@"
# before it: a password typed raw may hold "@", "#" or "?" (a URL parser would end the authority
# at "#" or "?" and leave the rest of the password in view). A query with an "@" and no path
# before it is redacted too: showing less is the safe side.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s]*@")


def redact_credentials(text: str) -> str:
    """``text`` with the user:password of every URL in it replaced by ``***``:
    ``http://admin:hunter2@host:8000/x`` -> ``http://***@host:8000/x``."""
    return _USERINFO.sub(r"\g<scheme>***@", text)
