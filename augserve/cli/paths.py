"""File-system checks shared by the subcommands: an input trace that exists, an output
folder or file that can be written, a full or read-only cache disk, an error as one line.

`trace_file` is an argparse `type=` (raises `argparse.ArgumentTypeError`); `out_dir` and
`out_file` raise ValueError naming the flag.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

Bad = argparse.ArgumentTypeError


def trace_file(text: str) -> str:
    """An existing, readable trace file (its format is checked when it is loaded)."""
    path = Path(text)
    if path.is_dir():
        raise Bad(f"{text!r} is a directory, not a trace file (.json or .jsonl)")
    if not path.exists():
        raise Bad(f"{text!r}: no such file")
    if not os.access(path, os.R_OK):
        raise Bad(f"{text!r}: not readable")
    return text


def out_dir(flag: str, text: str) -> Path:
    """Create the output directory if needed and check that files can be written in it;
    raises ValueError `--out: ...` naming the path otherwise."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag}: {text!r} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag}: cannot create directory {text!r}: {_reason(exc)}") from None
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag}: {text!r} is not writable ({_reason(exc)})") from None
    return path


def out_file(flag: str, text: str) -> Path:
    """A file that can be (over)written: not a directory, its folder exists and is
    writable; raises ValueError `--out: ...` naming the path otherwise."""
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"{flag}: {text!r} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise ValueError(f"{flag}: {text!r}: folder {str(parent)!r} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ValueError(
            f"{flag}: folder {str(parent)!r} is not writable ({_reason(exc)})"
        ) from None
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{flag}: {text!r} is not writable")
    return path


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


DISK_ERRORS = (errno.ENOSPC, errno.EROFS, errno.EDQUOT)


@contextlib.contextmanager
def disk_errors(folder: Path) -> Iterator[None]:
    """A full or read-only disk while writing under `folder` (the model cache) as one
    OSError naming the folder, whichever exception the writer raised for it (safetensors
    raises its own: "I/O error: No space left on device (os error 28)")."""
    try:
        yield
    except Exception as exc:
        code = exc.errno if isinstance(exc, OSError) else None
        if code not in DISK_ERRORS:
            code = next((c for c in DISK_ERRORS if os.strerror(c) in str(exc)), None)
        if code is None:
            raise
        hint = "free some space there, or point XDG_CACHE_HOME to another disk"
        raise OSError(code, f"{os.strerror(code)} ({hint})", str(folder)) from None


def one_line(exc: BaseException, strip: tuple[str, ...] = ()) -> str:
    """An exception as one line: an OSError as `reason: path`, else its message
    (without any of the prefixes `strip`, e.g. a flag name the caller puts first)."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.strerror}: {exc.filename}"
    else:
        text = str(exc) or type(exc).__name__
    for prefix in strip:
        text = text.removeprefix(prefix)
    return " ".join(text.split())
