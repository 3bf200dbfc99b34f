from __future__ import annotations

from pathlib import Path

import pytest

from augserve.workload.infercept import load_infercept
from augserve.workload.registry import default_data_dir
from augserve.workload.trace import Trace

INFERCEPT_DIR = default_data_dir() / "infercept"
MERGED = INFERCEPT_DIR / "merged_exp_uniform.json"
ONEAPI = INFERCEPT_DIR / "diverse_oneapi_merged_exp_uniform.json"


@pytest.fixture(scope="session")
def merged_path() -> Path:
    if not MERGED.exists():
        pytest.skip(f"{MERGED} not present")
    return MERGED


@pytest.fixture(scope="session")
def merged(merged_path: Path) -> Trace:
    return load_infercept(merged_path)


@pytest.fixture(scope="session")
def oneapi_path() -> Path:
    if not ONEAPI.exists():
        pytest.skip(f"{ONEAPI} not present")
    return ONEAPI
