"""Starting a stdio MCP server: which program runs, and what it said when it failed.

`command: python` (or `python3`) is this interpreter (`sys.executable`), not the
first python on PATH, and it finds modules in the tools file's folder and the
working directory (PYTHONPATH), as `python: module:f` tools do. The child's
stderr goes through a pipe: once the server is up its lines are logged
(`augserve.mcp.NAME`); a server that dies at start-up is reported with the last
lines of its own stderr rather than "Connection closed". A traceback the child
prints (Python's, or the boxed one of `rich`, which the MCP SDK's servers log for a
tool that crashed) is folded into one log line, its first exception; those lines
are kept (`StderrTail.errors`) so that a call answered only "Error executing tool X"
can tell the model what went wrong. Children get a wide `COLUMNS`, so `rich` wraps
less.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import deque
from typing import Any, TextIO

from augserve.server.tool_checks import PYTHONS
from augserve.server.tool_config import McpServerSpec, module_path


def resolve_command(spec: McpServerSpec) -> tuple[str, dict[str, str] | None]:
    """The program to run and the environment it gets (merged over the MCP defaults)."""
    assert spec.command is not None
    env = dict(spec.env) or None
    env = {"COLUMNS": "400", **(env or {})}  # rich wraps an exception's text less
    if spec.command not in PYTHONS:
        return spec.command, env
    paths = [*module_path(spec.base_dir), env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return sys.executable, env


_CONNECTORS = ("The above exception", "During handling", "another exception occurred")
LOGGED_CHARS = 300  # a folded traceback's line in the log


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


class TracebackFolder:
    """Folds each traceback group of a stderr stream (chained ones included) into one
    line, its first exception: `feed(line)` returns the lines to log now."""

    def __init__(self, keep: int = 16) -> None:
        self.errors: deque[str] = deque(maxlen=keep)  # each group's first exception
        self.count = 0  # traceback groups seen
        self._state = "out"  # out | frames | box | exc (rich: the text after the box)
        self._rich = False
        self._between = False  # a group's first exception is out: wrappers may follow
        self._exc: list[str] = []
        self._exc_indent = 0

    def feed(self, line: str) -> list[str]:
        text = line.strip()
        if self._state == "exc":
            if text and _indent(line) == self._exc_indent and "Traceback (" not in text:
                self._exc.append(text)  # rich wraps a long message
                return []
            return self._exception(" ".join(self._exc)) + self.feed(line)
        if "Traceback (most recent call last" in text:
            self._rich = "\u256d" in text
            self._state = "box" if self._rich else "frames"
            return []
        if self._state == "box":
            if text.startswith("\u2570"):
                self._state = "after_box"
            return []
        if self._state == "after_box":
            if text:
                self._state, self._exc, self._exc_indent = "exc", [text], _indent(line)
            return []
        if self._state == "frames":
            if text and line[:1] not in (" ", "\t"):
                return self._exception(text)
            return []
        if self._between and (
            not text or text.startswith(_CONNECTORS) or text.endswith("exception:")
        ):
            return []
        self._between = False
        return [line]

    def _exception(self, text: str) -> list[str]:
        self._state = "out"
        if self._between:  # a wrapper of the group's first exception: not logged again
            return []
        self._between = True
        self.errors.append(text)
        self.count += 1
        short = text if len(text) <= LOGGED_CHARS else text[:LOGGED_CHARS] + "..."
        return [f"{short} (a traceback, folded)"]


class StderrTail:
    """A pipe for one child's stderr: a thread logs each line (tracebacks folded) and
    keeps the last `keep`."""

    def __init__(self, name: str, keep: int = 40) -> None:
        read_fd, write_fd = os.pipe()
        self.file: TextIO = os.fdopen(write_fd, "w")  # what the child writes to
        self._read = os.fdopen(read_fd, "r", errors="replace")
        self.lines: deque[str] = deque(maxlen=keep)
        self.folder = TracebackFolder()
        self._log = logging.getLogger(f"augserve.mcp.{name}")
        self._done = threading.Event()
        self._live = False  # log lines as they come (after a good start; before, keep them)
        threading.Thread(target=self._pump, name=f"mcp-stderr-{name}", daemon=True).start()

    def _pump(self) -> None:
        try:
            for raw in self._read:
                for line in self.folder.feed(raw.rstrip("\n").rstrip()):
                    self.lines.append(line)
                    if self._live:
                        self._log.info("%s", line)
        finally:
            self._done.set()
            self._read.close()

    def spawned(self) -> None:
        """The child holds its own copy now: close ours, so the pipe ends with the child."""
        if not self.file.closed:
            self.file.close()

    def connected(self) -> None:
        """The server is up: log what it wrote while starting, and from now on each line."""
        for line in list(self.lines):
            self._log.info("%s", line)
        self._live = True

    def tail(self, n: int = 6, wait: float = 2.0) -> list[str]:
        """The last `n` non-empty lines, once the child's stderr has ended (or `wait`)."""
        self.spawned()
        self._done.wait(wait)
        return [ln for ln in self.lines if ln.strip()][-n:]


def failure_message(spec: McpServerSpec, exc: BaseException, tail: list[str]) -> str:
    where = spec.url or " ".join([spec.command or "", *spec.args])
    msg = f"MCP server {spec.name!r} ({where}): cannot connect: {_reason(exc)}"
    if tail:
        msg += "; its stderr ended with:\n    " + "\n    ".join(tail)
    return msg


def _reason(exc: BaseException) -> str:
    """An exception group (anyio's task groups) as its first leaf's message."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def stdio_transport(spec: McpServerSpec, errlog: Any) -> Any:
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    command, env = resolve_command(spec)
    params = StdioServerParameters(command=command, args=list(spec.args), env=env, cwd=spec.cwd)
    return stdio_client(params, errlog=errlog)
