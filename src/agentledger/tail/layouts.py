"""Where each producer keeps its files, and which of them is still being written.

Each layout lists the files of one root, and puts in ``unreadable`` (path -> the OS's reason) every
directory it could not look into: the files there are neither found nor gone, and the tailer says so.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePath

from agentledger.sources.claude_code import SUBAGENT_DEPTH, subagents_level
from agentledger.sources.oc_transcript import is_live, is_transcript

_ROTATED_DAY = re.compile(r"^events\.(\d{4})-(\d{2})-(\d{2})\.jsonl$")
_ROTATED_WEEK = re.compile(r"^events\.(\d{4})-W(\d{2})\.jsonl$")
LIVE_NAME = "events.jsonl"


@dataclass(frozen=True, slots=True)
class Candidate:
    path: str
    live: bool
    order: tuple  # sorts oldest first


def _rotated_order(name: str) -> tuple | None:
    m = _ROTATED_DAY.match(name)
    if m:
        try:
            return (dt.date(int(m[1]), int(m[2]), int(m[3])).toordinal(), name)
        except ValueError:
            return None
    m = _ROTATED_WEEK.match(name)
    if m:
        try:
            return (dt.date.fromisocalendar(int(m[1]), int(m[2]), 1).toordinal(), name)
        except ValueError:
            return None
    return None


def _telemetry_dirs(root: Path, unreadable: dict[str, str]) -> list[str]:
    """A state dir (``<root>/agents/*/telemetry``) or a telemetry dir itself."""
    dirs = []
    # os.path.exists: a root that cannot be searched is found unreadable by its listing, not raised here.
    if os.path.exists(root / LIVE_NAME) or root.name == "telemetry" or any(
        _rotated_order(p) is not None for p in _names(root, unreadable)
    ):
        dirs.append(str(root))
    # Plain strings, and no is_dir() per agent (listing a missing directory finds nothing): the
    # daemon lists every agent's directory on every pass.
    agents = os.path.join(root, "agents")
    dirs.extend(os.path.join(agents, agent, "telemetry") for agent in sorted(_names(agents, unreadable)))
    return dirs


def _names(directory: str | Path, unreadable: dict[str, str]) -> list[str]:
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        # Its mode, or a symlink loop, stays so: skipping it lets the other directories be read,
        # and the tailer neither takes the files in it for gone nor stays silent about them. Any
        # other error (I/O, no descriptors) may pass, and taking the directory for empty would
        # settle its files as lost, so it stops the pass instead.
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.ELOOP):
            raise
        unreadable[str(directory)] = exc.strerror
        return []


def oc_telemetry_files(root: Path, unreadable: dict[str, str]) -> list[Candidate]:
    found = []
    for tdir in _telemetry_dirs(root, unreadable):
        for name in _names(tdir, unreadable):
            if name == LIVE_NAME:
                # The live file always sorts after every rotated one of its directory.
                found.append(Candidate(os.path.join(tdir, name), True, (tdir, 1, 0, name)))
            else:
                order = _rotated_order(name)
                if order is not None:
                    found.append(Candidate(os.path.join(tdir, name), False, (tdir, 0) + order))
    found.sort(key=lambda c: c.order)
    return found


def _session_dirs(root: Path, unreadable: dict[str, str]) -> list[Path]:
    """A state dir (``<root>/agents/*/sessions``) or a sessions dir itself."""
    if root.name == "sessions" or any(is_transcript(n) for n in _names(root, unreadable)):
        return [root]
    agents = root / "agents"
    # No is_dir(): it raises in an agent's directory that cannot be searched, which listing tells.
    return [agents / a / "sessions" for a in sorted(_names(agents, unreadable))]


def oc_transcript_files(root: Path, unreadable: dict[str, str]) -> list[Candidate]:
    """Transcripts and their reset/deleted archives, which hold history of their own.

    An archive is a renamed transcript: listing it as not live makes the rename a rotation
    of the file being followed, never a new file."""
    found = []
    for sdir in map(str, _session_dirs(root, unreadable)):
        for name in _names(sdir, unreadable):
            if is_transcript(name):
                live = is_live(name)
                found.append(Candidate(os.path.join(sdir, name), live, (sdir, int(live), name)))
    found.sort(key=lambda c: c.order)
    return found


# Files of Claude Code's config dir itself, which a projects dir or a project's dir never holds.
_CONFIG_FILES = frozenset({"history.jsonl", "settings.json", "settings.local.json", ".credentials.json"})


def _project_dirs(root: Path, unreadable: dict[str, str]) -> list[Path]:
    """A config dir (``<root>/projects/*``), a projects dir, or one project's dir."""
    # os.path.isdir, and no is_dir() per project (listing a file finds nothing): is_dir() raises
    # where a directory cannot be searched, which listing tells.
    if os.path.isdir(root / "projects"):
        root = root / "projects"
    names = _names(root, unreadable)
    if not _CONFIG_FILES.isdisjoint(names):
        return []  # a config dir before its first session made projects/: its own files are no transcripts
    if any(n.endswith(".jsonl") for n in names):
        return [root]
    return [root / n for n in sorted(names)]


def _subagent_files(directory: Path, depth: int, unreadable: dict[str, str]) -> list[tuple[str, ...]]:
    """The subagents' transcripts under a session's ``subagents/`` folder (see claude_code.py), as
    paths relative to ``directory``: ``agent-*.jsonl`` in it and in the folders below it down to
    ``depth`` levels (a workflow's are two below, in ``workflows/<run>/``). Beside them lie files no
    agent's transcript is: ``.meta.json`` sidecars, and a workflow's ``journal.jsonl`` of what its
    agents returned, whose lines have no time and carry no spend."""
    found = []
    for name in _names(directory, unreadable):
        if name.endswith(".jsonl"):
            if name.startswith("agent-"):
                found.append((name,))
        elif depth and not name.startswith(".") and not name.endswith(".json"):
            # No is_dir(): listing a file finds nothing, as for projects.
            found.extend((name, *rest) for rest in _subagent_files(directory / name, depth - 1, unreadable))
    return found


def _subagents_below(root: Path) -> int | None:
    """How many levels a root lies below a session's ``subagents/`` folder (0: the folder itself);
    None for any other root."""
    up = subagents_level(root / "agent-.jsonl")  # as deep as a subagent's transcript in it could be
    return None if up is None or os.path.isdir(root / "projects") else up


def claude_code_files(root: Path, unreadable: dict[str, str]) -> list[Candidate]:
    """Session transcripts, then their subagents' (whose lines join a run the session started)."""
    below = _subagents_below(root)
    if below is not None:
        # Only the subagents' transcripts, never the other files that lie among them.
        return [Candidate(str(root.joinpath(*rel)), True, (str(root), 1, *rel))
                for rel in sorted(_subagent_files(root, SUBAGENT_DEPTH - below, unreadable))]
    found = []
    for pdir in _project_dirs(root, unreadable):
        for name in _names(pdir, unreadable):
            if name.endswith(".jsonl"):
                found.append(Candidate(str(pdir / name), True, (str(pdir), 0, name)))
            elif not name.startswith("."):
                sub = pdir / name / "subagents"
                for rel in _subagent_files(sub, SUBAGENT_DEPTH, unreadable):
                    found.append(Candidate(str(sub.joinpath(*rel)), True, (str(pdir), 1, name, *rel)))
    found.sort(key=lambda c: c.order)
    return found


LAYOUTS = {
    "oc-telemetry": oc_telemetry_files,
    "oc-transcript": oc_transcript_files,
    "claude-code": claude_code_files,
}


def kept_in_place(fmt: str, path: str) -> bool:
    """Whether a file a layout lists lies where its producer keeps it (FORMATS.md). Both transcript
    layouts take any ``*.jsonl`` by its name, so a root may look like more than one format: a Claude
    Code config dir's ``history.jsonl`` like an OpenClaw transcript, an OpenClaw sessions dir like a
    Claude Code project."""
    where = PurePath(path)
    if fmt == "oc-transcript":
        return where.parent.name == "sessions"
    if fmt == "claude-code":
        return where.parent.parent.name == "projects" or subagents_level(where) is not None
    return True  # a telemetry file's own name says what it is
