"""`augserve serve`'s flags for tenants (API keys) and for the limits on request
preparation (`augserve/server/input_limits.py`, docs/server.md)."""

from __future__ import annotations

import argparse
import os

from augserve.cli import args as argtypes
from augserve.server.input_limits import PrepLimits

API_KEY_ENV = "AUGSERVE_API_KEY"
D = " (default: %(default)s)"
_DEFAULT = PrepLimits()


_int = argtypes.int_arg
_seconds = argtypes.positive_float


def add_key_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--api-key", action="append", default=None, metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every endpoint but /health, /ping, "
        "/metrics and /version; repeat it for several tenants, whose prefix caches and "
        f"sessions are kept apart (default: ${API_KEY_ENV}, else none)",
    )  # fmt: skip
    g.add_argument(
        "--api-key-file", default=None, metavar="FILE",
        help="more API keys, one a line (# comments and blank lines skipped; default: none)",
    )  # fmt: skip


def add_limit_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("request limits (preparation off the event loop)")
    flag = g.add_argument
    flag("--max-tools-per-request", type=_int(1), default=_DEFAULT.max_tools,
         help="tools one request may declare (400 past it)" + D)  # fmt: skip
    flag("--max-schema-bytes", type=argtypes.byte_size, default=_DEFAULT.max_schema_bytes,
         help="bytes of one JSON schema: a tool's parameters, a response_format" + D)  # fmt: skip
    flag("--max-enum-values", type=_int(1), default=_DEFAULT.max_enum_values,
         help="enum values in one schema, all its enums together" + D)  # fmt: skip
    flag("--grammar-compile-timeout", type=_seconds, default=_DEFAULT.grammar_timeout,
         metavar="SECONDS", help="seconds a grammar may compile; past it the request "
         "gets a 400 and the compile is abandoned" + D)  # fmt: skip
    flag("--grammar-cache-bytes", type=argtypes.byte_size, default=_DEFAULT.grammar_cache_bytes,
         help="compiled grammars kept, least recently used dropped first" + D)  # fmt: skip
    flag("--prep-workers", type=_int(1), default=_DEFAULT.workers,
         help="threads preparing requests (templates, tokenizing, checks)" + D)  # fmt: skip
    flag("--prep-queue", type=_int(0), default=_DEFAULT.queue,
         help="requests waiting for a preparation thread; 503 past it" + D)  # fmt: skip


def prep_limits(args: argparse.Namespace) -> PrepLimits:
    return PrepLimits(
        workers=args.prep_workers,
        queue=args.prep_queue,
        max_tools=args.max_tools_per_request,
        max_schema_bytes=args.max_schema_bytes,
        max_enum_values=args.max_enum_values,
        grammar_timeout=args.grammar_compile_timeout,
        grammar_cache_bytes=args.grammar_cache_bytes,
    )


def api_keys_of(args: argparse.Namespace) -> list[str]:
    """--api-key (each), --api-key-file's keys, else $AUGSERVE_API_KEY; ValueError
    naming the flag for a file that cannot be read."""
    from augserve.server.tenancy import api_keys, read_key_file

    keys = list(args.api_key or [])
    if args.api_key_file:
        keys += read_key_file(args.api_key_file)
    if not keys and os.environ.get(API_KEY_ENV):
        keys = [os.environ[API_KEY_ENV]]
    try:
        return list(api_keys(keys))
    except ValueError as exc:
        raise ValueError(f"--api-key: {exc}") from None
