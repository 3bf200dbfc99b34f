"""Checks of a tools file that need no model: done at start-up, before the model loads.

- `python:` entries may not name a callable of a module that runs programs, reads or
  writes arbitrary files, loads code or talks to the network by itself
  (`UNSAFE_MODULES`: a tools file of `python: os:system` or `builtins:eval` would
  hand the model a shell), unless the tools file says `allow_unsafe: true`. The
  module named and the module the loaded callable comes from are both checked, so
  `my_tools:system` re-exporting `os.system` is refused too.
- stdio MCP servers' `command` must be a program that exists (on PATH, or a path
  to an executable file), and their `cwd` a folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

PYTHONS = ("python", "python3")  # an MCP `command` that means our own interpreter

# top-level modules whose callables are refused as tools (docs/server.md lists them)
UNSAFE_MODULES = frozenset(
    {
        "os", "posix", "nt", "subprocess", "_posixsubprocess", "pty", "builtins", "shutil",
        "sys", "importlib", "runpy", "code", "codeop", "ctypes", "pickle", "_pickle",
        "marshal", "shelve", "socket", "_socket", "multiprocessing", "signal", "_thread",
        "io", "_io", "pathlib", "tempfile", "asyncio", "webbrowser",
    }
)  # fmt: skip


def unsafe_module(module: str | None) -> str | None:
    """The refused top-level module `module` belongs to, or None."""
    top = (module or "").split(".")[0]
    return top if top in UNSAFE_MODULES else None


def _refusal(target: str, where: str, module: str) -> str:
    return (
        f"{where}: python: {target!r} comes from the module {module!r}, whose callables "
        "may not be tools (they run programs, touch files or load code); set "
        "'allow_unsafe: true' in the tools file to allow it"
    )


def check_python_target(target: str, where: str) -> None:
    """The module a `module:function` entry names (before anything is imported)."""
    module = unsafe_module(target.partition(":")[0])
    if module is not None:
        raise ValueError(_refusal(target, where, module))


def check_loaded(fn: Callable[..., Any], target: str, where: str) -> None:
    """The module the loaded callable really comes from (a re-export of os.system)."""
    module = unsafe_module(getattr(fn, "__module__", None))
    owner = getattr(fn, "__self__", None)
    if module is None and owner is not None:  # a bound method of an unsafe module's object
        module = unsafe_module(type(owner).__module__)
    if module is not None:
        raise ValueError(_refusal(target, where, module))


def check_commands(config: Any) -> None:
    """Every stdio MCP server's program exists, and its cwd is a folder (`config`: a
    `tool_config.ToolsConfig`, which imports this module)."""
    for spec in config.mcp_servers:
        where = f"mcp_servers: {spec.name!r}"
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            raise ValueError(f"{where}: cwd {spec.cwd!r} is not a folder")
        command = spec.command
        if command is None or command in PYTHONS:
            continue
        if os.sep in command:  # a path: relative to the server's cwd, as Popen reads it
            path = os.path.join(spec.cwd or "", command)
            ok = os.path.isfile(path) and os.access(path, os.X_OK)
        else:
            ok = shutil.which(command) is not None
        if not ok:
            raise ValueError(f"{where}: command {command!r} is not an executable program")
