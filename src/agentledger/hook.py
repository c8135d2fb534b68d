"""``agentledger gate``: ask the running daemon whether a tool call may go ahead.

Claude Code runs a command hook once per tool call, so this path imports only the
standard library and speaks HTTP over a plain socket: it starts about as fast as the
interpreter itself.

With ``--hook claude-code`` it reads the hook's JSON on stdin and prints what the hook
protocol expects: the deny JSON when a gate blocks, nothing otherwise (exit 0 either
way). When the daemon cannot be reached, ``--fail open`` (the default, as Claude Code
itself does) lets the call through and ``--fail closed`` denies it; any other event than
a PreToolUse has no call to deny, and is answered nothing either way.

Without ``--hook`` it asks about ``--session``/``--tool`` and prints the decision JSON;
the exit code is 0 for allow or warn and 1 for block.

A mistake on its own command line is one line on stderr. Claude Code denies a tool call
whose hook exits 2 and lets it through on any other failure, so as a hook (``--hook`` given)
a mistake exits 1 and fails open, unless ``--fail closed`` asks for 2; otherwise it exits 2.
"""

from __future__ import annotations

import json
import math
import socket
import sys
import time
from urllib.parse import quote, urlsplit

from agentledger.address import client_url

DEFAULT_URL = "http://127.0.0.1:9464"
MAX_TIMEOUT_S = 600  # Claude Code gives a hook 60 s by default; past ten minutes nobody waits for a tool
USAGE = """Usage: agentledger gate [--hook claude-code] [--session KEY] [--tool NAME]
                        [--url URL] [--fail open|closed] [--timeout SECONDS]

  --hook claude-code  read a Claude Code hook payload on stdin, answer in its protocol
  --session KEY       session key (or id) to ask about, without --hook
  --tool NAME         tool about to be called, without --hook
  --url URL           the daemon (default: $AGENTLEDGER_URL, else http://127.0.0.1:9464)
  --fail open|closed  when the daemon cannot be reached or answers too late: allow (default) or deny
  --timeout SECONDS   how long to wait for the daemon's whole answer (default 2)
"""


class Unreachable(Exception):
    pass


class UsageError(Exception):
    """A command line that cannot be read; ``opts``: what was read of it, which says whether it is a hook's."""

    def __init__(self, message: str, opts: dict):
        super().__init__(message)
        self.opts = opts


def _parse(argv: list[str]) -> dict:
    opts = {"hook": None, "session": None, "tool": None, "url": None, "fail": "open", "timeout": "2"}
    unread = None  # the first mistake; every option is read before it is told, --hook and --fail among them
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        key = name[2:] if name.startswith("--") else None
        if key not in opts:
            unread = unread or f"no such option {name!r}"
            continue
        if not eq:
            if not args:
                unread = unread or f"{name} needs a value"
                continue
            value = args.pop(0)
        opts[key] = value
    return _checked(opts, unread)


def _checked(opts: dict, unread: str | None) -> dict:
    if unread:
        raise UsageError(unread, opts)
    if opts["hook"] not in (None, "claude-code"):
        raise UsageError(f"--hook {opts['hook']!r} is not supported: use --hook claude-code", opts)
    if opts["fail"] not in ("open", "closed"):
        raise UsageError(f"--fail {opts['fail']!r}: use --fail open or --fail closed", opts)
    try:
        timeout = float(opts["timeout"])
    except ValueError:
        timeout = math.nan
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise UsageError(f"--timeout {opts['timeout']!r}: give a number of seconds above 0, at most {MAX_TIMEOUT_S}",
                         opts)
    opts["timeout"] = timeout
    try:
        # A plain socket speaks HTTP only.
        opts["url"] = client_url(opts["url"], DEFAULT_URL, ("http",))
    except ValueError as exc:
        raise UsageError(str(exc), opts) from None
    return opts


def _request(url: str, method: str, path: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + path  # a daemon a proxy serves under a path, as the query commands ask it
    request = (f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body or b'')}\r\n\r\n").encode()
    # One deadline for the whole exchange: a socket's timeout is per call, and a daemon answering a
    # byte at a time would hold the agent far past it (and past its own hook timeout, which lets the
    # call through whatever --fail says).
    deadline = time.monotonic() + timeout

    def left() -> float:
        if (remaining := deadline - time.monotonic()) <= 0:
            raise TimeoutError
        return remaining

    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout) as sock:
            sock.settimeout(left())
            sock.sendall(request + (body or b""))
            chunks = []
            while True:
                sock.settimeout(left())
                if not (chunk := sock.recv(65536)):
                    break
                chunks.append(chunk)
    except TimeoutError:
        raise Unreachable(f"agentledger daemon at {url} gave no whole answer within {timeout:g} s") from None
    except OSError as exc:
        raise Unreachable(f"agentledger daemon unreachable at {url}: {exc}") from None
    head, _, payload = b"".join(chunks).partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise Unreachable(f"agentledger daemon at {url} sent no HTTP answer") from None
    return status, payload


def _deny(reason: str) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                              "permissionDecisionReason": reason}})


def _asks_before_a_call(payload: bytes) -> bool:
    """Whether a hook payload is one a deny may answer: a PreToolUse, or one the daemon would refuse (no JSON
    object), which says nothing of what it is."""
    try:
        event = json.loads(payload)
    except ValueError:
        return True
    return not isinstance(event, dict) or event.get("hook_event_name") == "PreToolUse"


def _claude_code(opts: dict) -> int:
    payload = sys.stdin.buffer.read()
    try:
        status, body = _request(opts["url"], "POST", "/v1/hooks/claude-code", payload, opts["timeout"])
        if status != 200:
            raise Unreachable(f"agentledger daemon answered {status}: {body[:200].decode(errors='replace')}")
        answer = json.loads(body)
    except (Unreachable, ValueError) as exc:
        print(f"agentledger: {exc}", file=sys.stderr)
        if opts["fail"] == "closed" and _asks_before_a_call(payload):
            print(_deny(f"{exc} (the gate fails closed)"))
        return 0
    if answer:
        print(json.dumps(answer))
    return 0


def _ask(opts: dict) -> int:
    if not opts["session"]:
        raise UsageError("give --session KEY (and --tool NAME), or --hook claude-code", opts)
    # A name that is no UTF-8 (surrogate-escaped by Python) is sent as the bytes it was.
    session, tool = (quote(v, safe="", errors="surrogateescape") for v in (opts["session"], opts["tool"] or ""))
    path = f"/v1/gate?session_key={session}&tool={tool}"
    try:
        status, body = _request(opts["url"], "GET", path, None, opts["timeout"])
        if status != 200:
            raise Unreachable(f"agentledger daemon answered {status}: {body[:200].decode(errors='replace')}")
        decision = json.loads(body)
    except (Unreachable, ValueError) as exc:
        blocked = opts["fail"] == "closed"
        decision = {"decision": "block" if blocked else "allow", "gate": None,
                    "reason": f"{exc} (the gate fails {opts['fail']})"}
    print(json.dumps(decision))
    return 1 if decision.get("decision") == "block" else 0


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(USAGE, end="")
        return 0
    try:
        opts = _parse(argv)
        return _claude_code(opts) if opts["hook"] else _ask(opts)
    except UsageError as exc:
        print(f"agentledger gate: {exc} (see `agentledger gate --help`)", file=sys.stderr)
        # A hook's exit 2 denies the tool call: a hook's mistake fails as its --fail says (see the docstring).
        hook = exc.opts["hook"] is not None
        return 2 if not hook or exc.opts["fail"] == "closed" else 1
