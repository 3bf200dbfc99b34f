"""No compile on the request path (issue 34): off by default on CPU, and a compiled
engine compiles at start-up for every shape it will see."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.make_model import make_model
from augserve.engine.ops import compile_wanted
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.warmup import compile_count


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("m") / "m", seed=0)


def _run(engine, prompts: list[list[int]], max_tokens: int) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{compile_count()}-{i}-{len(ids)}", ids, params)
    while engine.has_unfinished():
        engine.step()


def test_cpu_does_not_compile_by_default(monkeypatch: pytest.MonkeyPatch, model: Path) -> None:
    monkeypatch.delenv("AUGSERVE_COMPILE", raising=False)
    assert not compile_wanted(None, 135_000_000, torch.device("cpu"))  # SmolLM2's size
    assert compile_wanted(None, 135_000_000, torch.device("cuda"))
    assert compile_wanted(True, 135_000_000, torch.device("cpu"))
    monkeypatch.setenv("AUGSERVE_COMPILE", "1")
    assert compile_wanted(None, 1_000, torch.device("cpu"))
    monkeypatch.delenv("AUGSERVE_COMPILE")
    engine = build_engine(EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64))
    before = compile_count()
    _run(engine, [[5, 6, 7], [8] * 20], 4)
    assert not engine.runner.compiled and compile_count() == before


# compiling on an empty inductor cache takes minutes on two cores (5.5 min at load 20):
# CI runs the default (eager) path; the compiled path is checked on demand
SLOW = pytest.mark.skipif(
    not os.environ.get("AUGSERVE_COMPILE_TESTS"),
    reason="compiles for minutes on a CPU; set AUGSERVE_COMPILE_TESTS=1 to run it",
)


@SLOW
def test_a_compiled_engine_compiles_before_serving_and_never_after(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with caplog.at_level(logging.INFO, logger="augserve"):
        engine = build_engine(
            EngineArgs(model=str(model), dtype="fp32", num_device_blocks=128, compile=True)
        )
    assert engine.runner.compiled
    lines = [r.getMessage() for r in caplog.records]
    assert any("compiling the model for cpu before serving" in m for m in lines)
    assert any("compiling: 4/4 step shapes" in m for m in lines)
    assert (tmp_path / "augserve" / "inductor").is_dir()  # inductor's cache, kept
    after_warm_up = compile_count()
    assert after_warm_up > 0
    # batch sizes 1, 2, 5 and 7, prompts of 1 to 40 tokens, decodes past new block widths
    _run(engine, [[9]], 3)
    _run(engine, [[5, 6], [7] * 33], 20)
    _run(engine, [[3 + i] * (1 + 6 * i) for i in range(5)], 6)
    _run(engine, [[4 + i] * (2 + 5 * i) for i in range(7)], 2)
    assert compile_count() == after_warm_up  # no step compiled anything


FIRST_REQUEST = """
import sys
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.sampling_params import SamplingParams
engine = build_engine(EngineArgs(model=sys.argv[1], dtype="fp32", num_device_blocks=64))
before = set(sys.modules)
params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
engine.add_request("r", [5, 6, 7] * 7, params)
while engine.has_unfinished():
    engine.step()
print(sorted(set(sys.modules) - before))
"""


def test_an_eager_engine_pays_its_first_use_costs_before_serving(model: Path) -> None:
    """In a fresh process, the first request imports nothing: build_engine's warm-up ran
    the first steps already. Without it the first step imported torch._dynamo (through
    the prepacked linear's custom op), 1.9 s inside a first request's TTFT."""
    env = {**os.environ, "AUGSERVE_PREPACK": "1"}  # the toy model on the packed linears
    proc = subprocess.run([sys.executable, "-c", FIRST_REQUEST, str(model)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ast.literal_eval(proc.stdout.strip().splitlines()[-1]) == []


def test_the_warm_up_draws_nothing_from_the_random_streams(model: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    build_engine(EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64))
    assert torch.equal(torch.rand(4), expected)
