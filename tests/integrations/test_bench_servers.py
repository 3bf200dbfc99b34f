"""bench_servers.py: the plugin's side of a protocol run is vLLM's own server with the
same flags plus our scheduler class, its options checked before it starts, and its
client sends no plan with the online predictor (no server is started here)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

import bench_servers as bs  # noqa: E402
import bench_tools_protocol as btp  # noqa: E402
from tool_workload import Scale, build_workload  # noqa: E402

from augserve.bench import protocol  # noqa: E402
from augserve.core.metrics import SLOConfig  # noqa: E402
from augserve.integrations.options import PluginOptions  # noqa: E402


def _args(engine: str = "vllm-plugin", measure: str = "client") -> argparse.Namespace:
    raw: dict[str, Any] = {
        "name": "t", "workload": "infercept", "time_scale": 1.0, "length_scale": 0.25,
        "rates": [1.0], "duration_s": 10.0, "drain_s": 5.0, "seeds": [0, 1, 2],
        "memory": {"augserve_device_tokens": 4096, "augserve_host_tokens": 0,
                   "baseline_tokens": 4096},
        "slo": {"ttft_s": 0.5, "norm_latency_s": 0.1, "source": "test config"},
        "settings": {"policies": ["augserve-slo"], "augserve_engine": engine,
                     "measure": measure},
    }  # fmt: skip
    args = argparse.Namespace(model="/m")
    btp.apply_config(args, protocol.ComparisonConfig.from_dict(raw))
    return args


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_engine_setting_is_checked_and_every_engine_has_a_row_prefix() -> None:
    assert _args().augserve_engine == "vllm-plugin"
    with pytest.raises(ValueError, match="settings.augserve_engine"):
        _args("sglang")
    assert set(bs.ROW_PREFIX) == set(btp.ENGINES)


def test_the_plugin_server_is_vllms_with_our_scheduler_class_and_nothing_else(
    tmp_path: Path,
) -> None:
    args = _args()
    slo = SLOConfig(ttft_slo=0.5, norm_latency_slo=0.1)
    plain = bs.vllm_server(args, tmp_path / "v.log")
    ours = bs.plugin_server(args, "augserve-slo", tmp_path / "p.log", tmp_path / "prof.json",
                            slo, "online")  # fmt: skip
    # the same flags as plain vLLM (its port aside), then the scheduler class and options
    extra = ours.argv[len(plain.argv) :]
    assert ours.argv[: len(plain.argv)] == [
        str(ours.port) if a == str(plain.port) else a for a in plain.argv
    ]
    assert _flag(extra, "--scheduler-cls") == bs.PLUGIN
    opts = json.loads(_flag(extra, "--additional-config"))["augserve"]
    assert opts == {"policy": "augserve-slo", "predictor": "online",
                    "profile": str(tmp_path / "prof.json"), "slo_ttft": 0.5,
                    "slo_norm_latency": 0.1}  # fmt: skip
    assert PluginOptions.from_mapping(opts, "t").slo_ttft == 0.5
    assert _flag(plain.argv, "--num-gpu-blocks-override") == "128"  # 4096 tokens / 32
    # our code in vLLM's venv for the plugin; plain vLLM's environment untouched
    assert ours.env["PYTHONPATH"] == str(ROOT) and plain.env.get("PYTHONPATH") != str(ROOT)
    assert ours.env["VLLM_CPU_OMP_THREADS_BIND"] == plain.env["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_a_bad_plugin_option_fails_before_any_server_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="policy"):
        bs.plugin_server(_args(), "no-such-policy", tmp_path / "p.log", tmp_path / "x.json",
                         None, "online")  # fmt: skip


def test_the_plugins_client_sends_no_plan_with_the_online_predictor() -> None:
    req = build_workload(2.0, 10.0, 0, Scale(length=0.25, time=1.0), 1000)[0]
    assert bs.calls_on_client("vllm") and bs.calls_on_client("vllm-plugin:augserve+online")
    assert not bs.calls_on_client("augserve-vllm:augserve+online")
    assert not bs.calls_on_client("augserve:augserve+online")
    assert bs.client_extras("vllm-plugin:augserve+online", agents=False)(req, 0) == {}
    oracle = bs.client_extras("vllm-plugin:augserve+oracle", agents=False)(req, 0)
    assert set(oracle) == {"vllm_xargs"}  # a predictor that reads plans gets one
    assert bs.client_extras("vllm", agents=False)(req, 0) == oracle  # plain vLLM ignores it
    # the agent loop: the plugin, like vLLM, is told only the session
    assert bs.client_extras("vllm-plugin:augserve+online", agents=True)(req, 0) == {
        "session_id": req.request_id
    }
    assert "augserve_segments" in bs.client_extras("augserve:augserve+online", True)(req, 0)


def test_read_on_the_servers_every_server_loads_the_same_marks_middleware(tmp_path: Path) -> None:
    slo = SLOConfig(ttft_slo=0.5, norm_latency_slo=0.1)
    prof = tmp_path / "prof.json"
    for measure, want in (("client", []), ("server", ["--middleware", bs.MARKS])):
        args = _args("vllm", measure)
        servers = [
            bs.vllm_server(args, tmp_path / "v.log"),
            bs.plugin_server(args, "augserve", tmp_path / "p.log", prof, slo, "online"),
            bs.augserve_vllm_server(args, "augserve", tmp_path / "a.log", prof, slo, "online"),
            bs.augserve_server(args, "augserve", tmp_path / "o.log", prof, slo, "online"),
        ]
        for srv in servers:
            tail = srv.argv[srv.argv.index("--middleware") :][:2] if want else []
            assert tail == want and srv.argv.count("--middleware") == len(want) // 2
        # plain vLLM imports this checkout's middleware, and nothing else of ours
        plain = servers[0]
        assert (plain.env.get("PYTHONPATH") == str(ROOT)) is (measure == "server")
        assert bs.PLUGIN not in plain.argv
