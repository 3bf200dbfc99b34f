"""A bounded load test on loopback: 64 concurrent streaming clients, each making a
server-side tool call, on a KV cache too small to hold them all at once (so the
scheduler preserves, swaps or discards paused requests). Every request completes
with its own answer, none is lost or duplicated, and KV usage returns to zero."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from conftest import MODEL, call_text, start_server
from openai import AsyncOpenAI

N = 64


def test_64_streaming_clients_with_tool_calls(
    chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tools = tmp_path_factory.mktemp("load") / "tools.json"
    tools.write_text(json.dumps({"tools": [
        {"name": "add", "python": "augserve_test_tools:add", "max_concurrency": 16}]}))  # fmt: skip
    srv = start_server(chat_model_dir, tools, num_device_blocks=1200, num_host_blocks=400,
                       max_num_seqs=64, max_batch_tokens=1024)  # fmt: skip
    try:
        for k in range(N):
            srv.script(1000 + k, f"Adding {k}. ", call_text("add", a=k, b=1000), f"Sum {k + 1000}.")
        finished_before = srv.metric("augserve_requests_finished_total", finish_reason="stop")

        async def one(client: AsyncOpenAI, k: int) -> tuple[str, str, str | None, list]:
            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"Add {k} and 1000."}],
                seed=1000 + k, max_tokens=300, stream=True, extra_body={"tool_trace": True},
            )  # fmt: skip
            ids, text, finish, trace = set(), "", None, []
            async for chunk in stream:
                ids.add(chunk.id)
                for c in chunk.choices:
                    text += c.delta.content or ""
                    if c.finish_reason:
                        finish, trace = c.finish_reason, c.model_extra.get("tool_trace", [])
            (cid,) = ids
            return cid, text, finish, trace

        async def run_all() -> list[tuple[str, str, str | None, list]]:
            client = AsyncOpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0,
                                 timeout=300)  # fmt: skip
            try:
                return list(await asyncio.gather(*(one(client, k) for k in range(N))))
            finally:
                await client.close()

        results = asyncio.run(run_all())
        assert len({cid for cid, *_ in results}) == N  # no response duplicated
        for k, (_, text, finish, trace) in enumerate(results):
            assert (text, finish) == (f"Adding {k}. Sum {k + 1000}.", "stop"), k
            assert [(t["name"], t["result"]) for t in trace] == [("add", str(k + 1000))]
        srv.wait_idle(timeout=30)
        m = srv.metrics()
        after = m[("augserve_requests_finished_total", (("finish_reason", "stop"),))]
        assert after - finished_before == N  # none lost, none counted twice
        assert m[("augserve_tool_calls_total", (("tool", "add"),))] == N
        for loc in ("device", "host"):
            assert m[("augserve_kv_blocks_used", (("location", loc),))] == 0
        for state in ("waiting", "running", "paused", "swapped"):
            assert m[("augserve_num_requests", (("state", state),))] == 0
    finally:
        srv.stop()
