"""Middleware a deployment adds by import path (`augserve serve --middleware
module.Name`, repeatable), as vLLM's `--middleware` takes it: an ASGI middleware class
(added with `app.add_middleware`) or an `async def (request, call_next)` HTTP
middleware function. Added after ours, so outermost: it sees a request before the API
key check and the body limits, and every byte of every answer (vLLM orders it the
same way). One use: `augserve.bench.request_marks.RequestMarks`, the benchmarks'
server-side request times, loaded the same way into vLLM's server."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI


def load_middleware(path: str) -> Any:
    """The object `path` names; ValueError naming `--middleware` if it is not importable
    or neither a class nor a coroutine function."""
    module_name, _, name = path.rpartition(".")
    if not module_name or not name:
        raise ValueError(f"--middleware {path!r}: expected module.Name")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--middleware {path!r}: cannot import it ({exc})") from None
    if not (inspect.isclass(obj) or inspect.iscoroutinefunction(obj)):
        raise ValueError(f"--middleware {path!r}: must be a class or an async function")
    return obj


def add_user_middleware(app: FastAPI, middleware: Sequence[Any]) -> None:
    """Add each (in order, each outside the one before) to `app`."""
    for obj in middleware:
        factory: Any = obj  # an ASGI class: starlette's factory protocol is not inferred
        if inspect.isclass(obj):
            app.add_middleware(factory)
        else:
            app.middleware("http")(obj)
