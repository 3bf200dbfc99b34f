"""The INFERCEPT trace ships in the package (tests and `augserve bench` read that copy);
when the project's `../shared` folder is beside the clone, the copy is byte-identical."""

from pathlib import Path

import pytest

from augserve.bench.runner import default_trace_path
from augserve.workload.registry import default_data_dir, make_workload

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "infercept"
FILES = ("merged_exp_uniform.json", "diverse_oneapi_merged_exp_uniform.json", "LICENSE")


def test_shipped_trace_is_in_the_package_and_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUGSERVE_DATA_DIR", raising=False)
    shipped = default_data_dir() / "infercept"
    assert shipped == ROOT / "augserve" / "data" / "infercept"
    for name in FILES:
        assert (shipped / name).stat().st_size > 0
    assert default_trace_path() == shipped / FILES[0]
    trace = make_workload("infercept", 50, seed=1)
    assert len(trace.requests) == 50
    assert len(make_workload("infercept-oneapi", 20, seed=1).requests) == 20


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent (a clean clone)")
def test_shipped_trace_is_the_shared_file() -> None:
    shipped = ROOT / "augserve" / "data" / "infercept"
    for name in FILES:
        assert (shipped / name).read_bytes() == (SHARED / name).read_bytes()
