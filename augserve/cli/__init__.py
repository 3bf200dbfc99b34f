"""augserve: serving tool-augmented LLM inference with the AugServe scheduler and its
baselines, in a simulator (`bench`) or on a PyTorch engine (`generate`, `profile`).

Each face adds its own subcommands from its own module (see `_COMMAND_MODULES`).
Every usage error is one line, `augserve: error: ...`, exit status 2; Ctrl-C
exits with 130.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from augserve import __version__
from augserve.cli.paths import one_line

# module -> it defines `add_parser(subparsers)`; a subparser sets `func(args) -> int`.
# Modules that are missing (a face not built yet, an extra not installed) are skipped.
_COMMAND_MODULES = (
    "augserve.cli.workload",
    "augserve.cli.bench",
    "augserve.cli.reproduce",
    "augserve.cli.engine",
    "augserve.cli.predictor",
    "augserve.cli.serve",
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the command and the problem
    (no usage dump); `--help` shows the usage. Subparsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see: {self.prog} --help)"
        self.exit(EXIT_USAGE, f"augserve: error: {message}{hint}\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks; wider option column."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="augserve",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"augserve {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (exc.name == name or name.startswith(exc.name + ".")):
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("augserve: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, OSError) as exc:
        print(f"augserve: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
