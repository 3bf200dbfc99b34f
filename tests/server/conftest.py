"""Live servers for the tests: a tiny random-weight model with a ChatML template, the
real engine, the real HTTP stack on 127.0.0.1 (ephemeral port), and a scripted
sampler that forces chosen tokens for requests with chosen seeds (random weights
never emit tool calls by themselves). Parsing, pausing, tool execution and
resumption are the real code paths."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # augserve_test_tools

HERE = Path(__file__).resolve().parent
MODEL = "test-model"
POISON = 666  # a request with this seed makes the forward raise


class ScriptedSampler:
    """Rows whose seed has a script get its next token (EOS once it runs out);
    other rows sample as usual."""

    def __init__(self, base: Any, eos: int) -> None:
        self.base = base
        self.eos = eos
        self.scripts: dict[int, deque[int]] = {}
        self.lock = threading.Lock()

    def __call__(self, logits: Any, params: list[Any], positions: list[int] | None = None) -> list:
        out = self.base(logits, params, positions)
        with self.lock:
            if any(p.seed == POISON for p in params):
                raise RuntimeError("the forward failed (poisoned seed)")
            for row, p in enumerate(params):
                q = self.scripts.get(p.seed) if p.seed is not None else None
                if q is not None:
                    out[row] = q.popleft() if q else self.eos
        return out


class LiveServer:
    def __init__(self, handle: Any, sampler: ScriptedSampler, tokenizer: Any) -> None:
        self.handle = handle
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.url = handle.url
        self.state = handle.state

    def script(self, seed: int, *texts: str) -> None:
        """The tokens a request with `seed` will sample: `texts` in order, then EOS."""
        ids: list[int] = []
        for t in texts:
            ids += self.tokenizer.encode(t, add_special_tokens=False)
        with self.sampler.lock:
            self.sampler.scripts[seed] = deque(ids)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)

    def session_blocks(self) -> tuple[int, int]:
        """Device and host blocks held by paused client sessions (`sched/sessions.py`)."""
        sessions = self.state.engine.engine.scheduler.sessions
        held = list(sessions.requests.values()) if sessions is not None else []
        device = {b for r in held for b in r.block_ids}  # sessions may share cached blocks
        return len(device), sum(len(r.host_block_ids) for r in held)

    def wait_idle(self, timeout: float = 20.0) -> None:
        """Until no request is live and no KV block is used but by paused sessions."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            device, host = self.session_blocks()
            if (
                not self.state.live
                and self.metric("augserve_kv_blocks_used", location="device") == device
                and self.metric("augserve_kv_blocks_used", location="host") == host
            ):
                return
            time.sleep(0.05)
        raise AssertionError(f"not idle: live={self.state.live}, metrics={self.metrics()}")

    def stop(self) -> None:
        self.handle.stop()


def write_tools(path: Path, mcp: bool = False, **extra: Any) -> Path:
    def py(name: str, fn: str, **kw: Any) -> dict:
        return {"name": name, "python": f"augserve_test_tools:{fn}", **kw}

    data: dict[str, Any] = {
        "tools": [
            py("get_weather", "get_weather"),
            py("add", "add"),
            py("boom", "boom"),
            py("sleepy", "sleepy", timeout=0.3),
            py("slow_weather", "sleepy", timeout=30),
            py("garbage", "garbage"),
        ],
        **extra,
    }
    if mcp:
        server = {
            "name": "test",
            "command": sys.executable,
            "args": [str(HERE / "mcp_test_server.py")],
            "prefix": "mcp_",
            "timeout": 20,
        }
        data["mcp_servers"] = [server]
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from augserve.engine.chatml import CHATML_TEMPLATE
    from augserve.engine.make_model import make_model

    # a longer context than the preset's: tool definitions make long system prompts
    d = make_model(
        "llama",
        "tiny",
        tmp_path_factory.mktemp("server") / "m",
        seed=3,
        overrides={"max_position_embeddings": 4096},
    )
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHATML_TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def start_server(
    model_dir: Path,
    tools_file: Path | None = None,
    api_key: str | None = None,
    limits: Any = None,
    chat_template: Path | None = None,
    allow_scripted: bool = False,
    offer: str = "request",
    middleware: tuple[Any, ...] = (),
    **engine: Any,
) -> LiveServer:
    import torch

    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.engine.builder import EngineArgs, build_engine
    from augserve.server.launch import BackgroundServer, ServeOptions, build_state
    from augserve.server.state import ServerLimits

    torch.set_num_threads(1)
    # as `augserve serve`: the prefix cache on whatever the policy
    args = {"dtype": "fp32", "num_device_blocks": 512, "num_host_blocks": 64,
            "enable_prefix_caching": True, **engine}  # fmt: skip
    llm_engine = build_engine(EngineArgs(model=str(model_dir), **args))
    sampler = ScriptedSampler(llm_engine.runner.sampler, eos=1)
    llm_engine.runner.sampler = sampler
    opts = ServeOptions(
        (MODEL,),
        str(tools_file) if tools_file else None,
        str(chat_template) if chat_template else None,
        limits=limits or ServerLimits(),
        allow_scripted_tools=allow_scripted,
        offer_server_tools=offer,
    )
    state = build_state(AsyncLLMEngine(llm_engine), model_dir, opts)
    handle = BackgroundServer(state, api_key=api_key, middleware=middleware).start()
    return LiveServer(handle, sampler, llm_engine.tokenizer)


@pytest.fixture(scope="module")
def server(chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tools = write_tools(tmp_path_factory.mktemp("tools") / "tools.json")
    srv = start_server(chat_model_dir, tools)
    yield srv
    srv.stop()


def call_text(name: str, **arguments: Any) -> str:
    """A Hermes tool call as the model writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
