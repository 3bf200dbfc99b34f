"""A bounded load test on loopback: 64 concurrent streaming clients, each making a
server-side tool call, on a KV cache too small to hold them all at once (so requests
queue, and paused ones are preserved, swapped or discarded as the policy decides).
Every request completes with its own answer, none is lost or duplicated, and KV
usage returns to zero afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import MODEL, LiveServer, call_text, start_server
from openai import AsyncOpenAI

N = 64
# a short template keeps the prompts small, so the test measures concurrency, not prefill
COMPACT = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class StepPeaks:
    """Wraps the engine's `step`: after every step, the peak of each scheduler count
    (exact per iteration, unlike polling /metrics, which can miss a brief peak)."""

    def __init__(self, srv: LiveServer) -> None:
        self.engine = srv.state.engine.engine
        self.step = self.engine.step
        self.peak: dict[str, int] = {"waiting": 0, "paused": 0, "device_blocks": 0}
        self.engine.step = self

    def __call__(self) -> Any:
        out = self.step()
        s = self.engine.stats()
        for key, value in (
            ("waiting", s.num_waiting),
            ("paused", sum(s.num_paused.values())),
            ("device_blocks", s.device_blocks_used),
        ):
            self.peak[key] = max(self.peak[key], value)
        return out


async def one(client: AsyncOpenAI, k: int) -> tuple[str, str, str | None, list]:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": f"Add {k} and 1000."}],
        seed=1000 + k,
        max_tokens=300,
        stream=True,
        extra_body={"tool_trace": True, "server_tools": ["add"]},
    )
    ids, text, finish, trace = set(), "", None, []
    async for chunk in stream:
        ids.add(chunk.id)
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.finish_reason:
                finish, trace = c.finish_reason, c.model_extra.get("tool_trace", [])
    (cid,) = ids
    return cid, text, finish, trace


def run_clients(url: str) -> list[tuple[str, str, str | None, list]]:
    async def main() -> list[tuple[str, str, str | None, list]]:
        client = AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
        try:
            return list(await asyncio.gather(*(one(client, k) for k in range(N))))
        finally:
            await client.close()

    return asyncio.run(main())


def test_64_streaming_clients_with_tool_calls(
    chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    d = tmp_path_factory.mktemp("load")
    (d / "tools.json").write_text(
        json.dumps(
            {
                "tools": [
                    {
                        "name": "add",
                        "python": "augserve_test_tools:add_slowly",
                        "max_concurrency": 16,
                    }
                ]
            }
        )
    )
    (d / "template.jinja").write_text(COMPACT)
    srv = start_server(
        chat_model_dir,
        d / "tools.json",
        chat_template=d / "template.jinja",
        num_device_blocks=300,
        num_host_blocks=64,
        max_num_seqs=64,
        max_batch_tokens=512,
    )
    try:
        for k in range(N):
            srv.script(
                1000 + k, f"Adding {k}. ", call_text("add", a=k, b=1000, ms=200), f"Sum {k + 1000}."
            )
        stops_before = srv.metric("augserve_requests_finished_total", finish_reason="stop")
        peaks = StepPeaks(srv)
        results = run_clients(srv.url)
        assert len({cid for cid, *_ in results}) == N  # no response duplicated
        for k, (_, text, finish, trace) in enumerate(results):
            assert (text, finish) == (f"Adding {k}. Sum {k + 1000}.", "stop"), k
            assert [(t["name"], t["result"]) for t in trace] == [("add", str(k + 1000))]
        srv.wait_idle(timeout=30)
        m = srv.metrics()
        stops = m[("augserve_requests_finished_total", (("finish_reason", "stop"),))]
        assert stops - stops_before == N  # none lost, none counted twice
        assert m[("augserve_tool_calls_total", (("tool", "add"),))] == N
        for loc in ("device", "host"):
            assert m[("augserve_kv_blocks_used", (("location", loc),))] == 0
        for state in ("waiting", "running", "paused", "swapped"):
            assert m[("augserve_num_requests", (("state", state),))] == 0
        # the KV cache was the bottleneck: requests queued, the device filled up, and
        # requests sat paused in their calls while others ran
        assert peaks.peak["waiting"] > 0
        assert peaks.peak["device_blocks"] >= 0.9 * 300
        assert peaks.peak["paused"] > 0
    finally:
        srv.stop()
