"""Where the daemon is reached: the host it listens on, and the URL its clients (the query commands, the
live view, ``agentledger gate``) ask it at, checked here once for all of them.

Standard library only: ``agentledger gate`` imports it on every tool call.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit


def is_host(host: str) -> bool:
    """Whether ``host`` is a name or an IP address that a URL can carry and a socket can look up."""
    labels = host.removesuffix(".").split(".")  # a trailing dot: a name spelled fully qualified
    return all(0 < len(label) < 64 for label in labels) and all(
        c.isascii() and (c.isalnum() or c in "-_:%") for c in "".join(labels))


def url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    """What keeps a client from asking a daemon at ``url``, as words to follow it; None when nothing does."""
    # A request line cannot carry them: they crashed the HTTP client, or were sent on to fail as "unreachable".
    if not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        return "holds a space, a control character or a non-ASCII one"
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket left open: "http://[::1:9464"
        return "is not a URL"
    if parts.scheme not in schemes:
        return f"is not an {' or '.join(scheme + '://' for scheme in schemes)} URL"
    if "@" in parts.netloc or parts.query or parts.fragment:
        return "holds more than the daemon's address (a user, a query or a fragment)"
    if not is_host(parts.hostname or ""):
        return "names no host to connect to"
    try:
        port = parts.port
    except ValueError:  # not digits, or past 65535
        port = 0
    if port == 0:  # None: the scheme's own port
        return "names no port from 1 to 65535"
    return None


def client_url(flag: str | None, default: str, schemes: tuple[str, ...]) -> str:
    """The URL to ask the daemon at: ``flag`` (``--url``), else ``$AGENTLEDGER_URL``, else ``default``, which
    is built from a checked setting. ValueError naming where the URL was given, what is wrong with it and the
    fix: a typo in its port had the client crash, or a gate fail open as if no daemon ran."""
    env = os.environ.get("AGENTLEDGER_URL")
    url, origin = (flag, "--url") if flag is not None else (env, "$AGENTLEDGER_URL") if env else (default, None)
    problem = origin and url_problem(url, schemes)
    if problem:
        # A daemon told to listen on port 0 picks its port as it starts: the setting is no example to give.
        example = default if url_problem(default, schemes) is None else "http://127.0.0.1:9464"
        raise ValueError(f"{origin} {url!r} {problem}: give one such as {example}")
    return url
