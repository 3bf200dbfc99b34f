"""augserve: serving tool-augmented LLM inference with the AugServe scheduler and its
baselines, in a simulator (`bench`) or on a PyTorch engine (`generate`, `profile`).

Each face adds its own subcommands from its own module (see `_COMMAND_MODULES`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# module -> it defines `add_parser(subparsers)`; a subparser sets `func(args) -> int`.
# Modules that are missing (a face not built yet, an extra not installed) are skipped.
_COMMAND_MODULES = (
    "augserve.cli.workload",
    "augserve.cli.bench",
    "augserve.cli.engine",
    "augserve.cli.predictor",
    "augserve.cli.serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="augserve", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
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
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"augserve: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
