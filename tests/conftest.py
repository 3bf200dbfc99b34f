import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Tests read the data shipped in the package (a clean clone has it), never ../shared.
PACKAGED_DATA = ROOT / "augserve" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent / "sched"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF through the same fetch the server uses (once per
    machine, cached under the user's cache folder); skips when it cannot be had."""
    from augserve.engine.smollm2 import ModelUnavailable, ensure_smollm2_gguf

    try:
        return ensure_smollm2_gguf()
    except ModelUnavailable as e:
        pytest.skip(f"SmolLM2 unavailable: {e}")


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf: Path) -> Path:
    """Its model directory, with augserve's tool-capable template (as `--model smollm2`)."""
    from augserve.engine.smollm2 import smollm2_model_dir

    return smollm2_model_dir()
