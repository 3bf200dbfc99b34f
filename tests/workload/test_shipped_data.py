"""The INFERCEPT trace ships in the package, identical to the shared copy."""

from pathlib import Path

from augserve.workload.registry import default_data_dir, make_workload

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "infercept"


def test_shipped_trace_is_the_shared_file_and_loads(monkeypatch):
    monkeypatch.delenv("AUGSERVE_DATA_DIR", raising=False)
    shipped = default_data_dir() / "infercept"
    for name in ("merged_exp_uniform.json", "diverse_oneapi_merged_exp_uniform.json", "LICENSE"):
        assert (shipped / name).read_bytes() == (SHARED / name).read_bytes()
    trace = make_workload("infercept", 50, seed=1)
    assert len(trace.requests) == 50
