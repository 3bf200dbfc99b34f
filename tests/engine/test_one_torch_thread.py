"""The server builds, warms and steps its engine on one thread (`engine_thread.py`): two
threads running torch's OpenMP pools made libgomp stop spinning at its barriers and every
2-thread decode step 2.2x slower (docs/engine-quant.md, "One OpenMP team")."""

from __future__ import annotations

import argparse
import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from augserve.cli.serve import _build
from augserve.engine.builder import EngineArgs
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.sampling_params import SamplingParams


def test_the_server_engine_loads_and_steps_on_the_same_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_model("llama", "tiny", tmp_path / "m", seed=1)
    seen: dict[str, set[int]] = {"init": set(), "execute": set()}
    init, execute = ModelRunner.__init__, ModelRunner.execute

    def spy_init(self: ModelRunner, *a: Any, **k: Any) -> None:
        seen["init"].add(threading.get_ident())
        init(self, *a, **k)

    def spy_execute(self: ModelRunner, *a: Any, **k: Any) -> Any:
        seen["execute"].add(threading.get_ident())
        return execute(self, *a, **k)

    monkeypatch.setattr(ModelRunner, "__init__", spy_init)
    monkeypatch.setattr(ModelRunner, "execute", spy_execute)
    args = argparse.Namespace(engine="augserve")
    aengine = _build(args, EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64))

    async def main() -> list[int]:
        params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=4)
        outs = [o async for o in aengine.generate("The sun rises", params, "r0")]
        await aengine.shutdown()
        return outs[-1].outputs[0].token_ids

    assert len(asyncio.run(main())) == 4
    assert len(seen["init"]) == 1 and seen["init"] == seen["execute"]  # one thread for all
    assert threading.get_ident() not in seen["execute"]  # and not the loop's
