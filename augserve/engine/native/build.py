"""Compile the native kernels (`gemm.c`, `gemm16.c`, `gemm16w.c`, `attention.c`, `decode.c`,
`native.h`) once per machine and load them with ctypes.

The library is built with the system's C compiler (`CC`, else `cc`/`gcc`) at
`-O3 -march=native -fopenmp` into `resolve.cache_root()/native/`, under a name that
hashes the source, the compiler's version and the flags, so a new source, compiler or
CPU builds anew and a cached build is reused by every later process (~2 s on 2 cores,
once). The build writes to a temporary file and renames it, so processes that build at
the same time never load half a file. `torch` is imported first: the library's OpenMP
calls then bind to torch's own libgomp, one thread pool for both.

`AUGSERVE_NATIVE=0` turns the kernels off (torch's kernels run instead); `1` makes a
failed build an error instead of a warning; unset or `auto`: used where they build.
`AUGSERVE_NATIVE_ARCH` replaces `-march=native` (e.g. `-march=x86-64-v3` builds the
AVX2 kernels on an AVX-512 machine, `-march=x86-64` the plain C ones): the tests check
every variant against the same reference this way.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch  # noqa: F401 - loads torch's libgomp before ours binds to it

from augserve.engine.ops import env_switch

log = logging.getLogger("augserve.native")

HERE = Path(__file__).resolve().parent
# one library; native.h is shared
SOURCES = ("gemm.c", "gemm16.c", "gemm16w.c", "attention.c", "decode.c")
HEADERS = ("native.h",)
FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu11", "-ffp-contract=off")
ABI_VERSION = 10  # gemm.c's aug_abi_version(); a mismatch means a stale build


class NativeUnavailable(RuntimeError):
    """The kernels could not be built or loaded (the reason is the message)."""


def compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc:
        return cc
    return shutil.which("cc") or shutil.which("gcc")


def _cache_dir() -> Path:
    from augserve.engine.cache_dir import cache_root

    return cache_root() / "native"


def _version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeUnavailable(f"compiler {cc!r} does not run: {e}") from None
    return out.stdout.splitlines()[0] if out.stdout else cc


def arch_flags() -> tuple[str, ...]:
    return tuple(os.environ.get("AUGSERVE_NATIVE_ARCH", "-march=native").split())


def library_path(cc: str, arch: tuple[str, ...]) -> Path:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update((HERE / name).read_bytes())
    h.update(_version(cc).encode())
    h.update(" ".join(FLAGS + arch).encode())
    h.update(_cpu_signature().encode())
    return _cache_dir() / f"augserve-kernels-{h.hexdigest()[:16]}.so"


def _cpu_signature() -> str:
    """-march=native builds for this CPU: its flags are part of the cache key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return os.uname().machine


def build(cc: str, arch: tuple[str, ...]) -> Path:
    """The compiled library, building it if no build of this source/compiler/flags/CPU
    exists."""
    path = library_path(cc, arch)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    cmd = [cc, *FLAGS, *arch, "-o", tmp, *(str(HERE / name) for name in SOURCES), "-lm"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise NativeUnavailable(f"{' '.join(cmd)} failed: {' / '.join(tail)}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("built the native kernels: %s", path)
    return path


@functools.cache
def load() -> ctypes.CDLL:
    """The loaded library; NativeUnavailable with the reason when it cannot be had."""
    if env_switch("AUGSERVE_NATIVE") is False:
        raise NativeUnavailable("AUGSERVE_NATIVE=0")
    return load_variant(arch_flags())


@functools.cache
def load_variant(arch: tuple[str, ...]) -> ctypes.CDLL:
    """The library built with these architecture flags (each variant its own file)."""
    cc = compiler()
    if cc is None:
        raise NativeUnavailable("no C compiler (set CC, or install gcc)")
    lib = ctypes.CDLL(str(build(cc, arch)))
    lib.aug_abi_version.restype = ctypes.c_int
    if lib.aug_abi_version() != ABI_VERSION:
        raise NativeUnavailable(f"stale build: ABI {lib.aug_abi_version()} != {ABI_VERSION}")
    declare(lib)
    return lib


_P, _I64, _INT, _FLOAT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGNATURES: dict[str, tuple[list[type], type | None]] = {  # the exported C functions
    "aug_acts_bytes": ([_I64, _I64], _I64),
    "aug_quantize_rows": ([_P, _I64, _I64, _I64, _P], None),
    "aug_gemm": ([_P, _INT, _P, _P, _I64, _I64, _I64, _I64, _P, _INT], None),
    "aug_dequant": ([_P, _INT, _I64, _I64, _P, _INT, _INT], None),
    "aug_acts16_bytes": ([_I64, _I64], _I64),
    "aug_gemm16_wide": ([_P, _INT, _P, _P, _P, _I64, _I64, _I64, _I64, _P, _INT], None),
    "aug_row_bytes": ([_INT, _I64], _I64),
    "aug_rows": ([_P, _INT, _I64, _I64, _P, _I64, _P], None),
    "aug_rmsnorm": ([_P, _P, _P, _I64, _I64, _FLOAT], None),
    "aug_attn_decode": (
        [_P, _P, _P, _INT, _P, _I64, _P, _P, _I64, _INT, _INT, _INT, _INT, _FLOAT, _INT],
        None,
    ),
    "aug_llama_workspace": ([_P, _I64], _I64),
    "aug_llama_decode": ([_P, _P, _I64, _P, _P, _I64, _P, _P, _P, _P, _INT], None),
}


def declare(lib: ctypes.CDLL) -> None:
    """Argument and result types of every exported function (ctypes checks calls)."""
    for name, (args, res) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res


@functools.cache
def available() -> bool:
    """Whether the kernels are used: they load, or AUGSERVE_NATIVE=1 and they must."""
    try:
        load()
    except NativeUnavailable as e:
        if env_switch("AUGSERVE_NATIVE") is True:
            raise
        if "AUGSERVE_NATIVE=0" not in str(e):
            log.warning("native CPU kernels unavailable, using torch's: %s", e)
        return False
    return True


def isa() -> str:
    """Which integer dot product the build uses: avx512-vnni, avx-vnni, avx2 or scalar
    (asked of the library once per loaded build: prefill asks per product)."""
    return isa_of(load())


@functools.cache
def isa_of(lib: ctypes.CDLL) -> str:
    fn = lib.aug_isa
    fn.restype = ctypes.c_char_p
    return str(fn().decode())
