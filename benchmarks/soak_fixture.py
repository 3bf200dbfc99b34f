"""The server side of the soak (`soak_server.py`): its tiny model, its tools, the
sampler that scripts tool calls by seed, the server process and the MCP server it
supervises. Run by the soak, not by hand:

    python benchmarks/soak_fixture.py --serve PORT MODEL_DIR TOOLS OPTS   # the server
    python benchmarks/soak_fixture.py --mcp                               # the MCP server
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

MODEL = "soak"
EOS = 1
# scenario -> (weight, the tool the script calls, its arguments); None: plain text
SCENARIOS: dict[str, tuple[float, str | None, dict[str, Any]]] = {
    "plain": (0.25, None, {}),
    "stream": (0.15, None, {}),
    "disconnect": (0.08, None, {}),
    "weather": (0.15, "get_weather", {"city": "Oslo"}),
    "failing": (0.08, "boom", {}),
    "timeout": (0.05, "slow", {"seconds": 3}),
    "mcp": (0.20, "mcp_add", {"a": 2, "b": 3}),
    "mcp_kill": (0.04, "mcp_crash", {}),
    # hostile requests (weight set by --hostile): plain text for the sampler
    "hostile_enum": (0.0, None, {}),
    "hostile_tools": (0.0, None, {}),
    "hostile_tokenize": (0.0, None, {}),
    "hostile_schema": (0.0, None, {}),
}
KINDS = list(SCENARIOS)
HOSTILE = [k for k in KINDS if k.startswith("hostile_")]


# --- tools the server runs (`soak_fixture:NAME`) ------------------------------------------
def get_weather(city: str) -> dict[str, Any]:
    return {"city": city, "temp": 21}


def boom() -> str:
    raise RuntimeError("this tool always fails")


def slow(seconds: float = 3.0) -> str:
    time.sleep(seconds)
    return "late"


# --- the server process ------------------------------------------------------------------
class SoakSampler:
    """Rows whose seed names a tool scenario get its script: the call, then "done", then
    EOS. Scripts are made at a request's first token and dropped when they run out."""

    def __init__(self, base: Any, tokenizer: Any) -> None:
        self.base = base
        self.tokenizer = tokenizer
        self.scripts: dict[int, deque[int]] = {}

    def script(self, seed: int) -> deque[int] | None:
        tool, args = SCENARIOS[KINDS[seed % len(KINDS)]][1:]
        if tool is None:
            return None
        call = json.dumps({"name": tool, "arguments": args})
        text = f"<tool_call>\n{call}\n</tool_call>"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return deque(ids + self.tokenizer.encode(" done", add_special_tokens=False))

    def __call__(self, logits: Any, params: list[Any], positions: Any = None) -> list[Any]:
        out: list[Any] = self.base(logits, params, positions)
        for row, p in enumerate(params):
            if p.seed is None or p.seed < 1000:
                continue
            q = self.scripts.get(p.seed)
            if q is None and p.seed not in self.scripts:
                q = self.script(p.seed)
                if q is None:
                    continue
                self.scripts[p.seed] = q
            if q is None:
                continue
            if q:
                out[row] = q.popleft()
            else:  # the script ran out: end the request, forget the script
                out[row] = EOS
                self.scripts.pop(p.seed, None)
        return out


def serve(port: int, model_dir: str, tools: str, opts: dict[str, Any]) -> int:
    import torch
    from soak_memory import MemorySampler

    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.engine.builder import EngineArgs, build_engine
    from augserve.engine.native_memory import tune_allocator
    from augserve.server.input_limits import PrepLimits
    from augserve.server.launch import ServeOptions, build_state, serve_forever
    from augserve.server.state import TRIM_AFTER_BODY_BYTES, ServerLimits

    torch.set_num_threads(1)
    if opts["malloc_tuning"]:  # as `augserve serve` (its default; --no-malloc-tuning)
        tune_allocator()
    engine = build_engine(
        EngineArgs(
            model=model_dir,
            dtype="fp32",
            num_device_blocks=1024,
            num_host_blocks=128,
            enable_prefix_caching=True,
        )  # as `augserve serve`
    )
    sampler = SoakSampler(engine.runner.sampler, engine.tokenizer)
    engine.runner.sampler = sampler  # type: ignore[assignment]
    prep = (
        PrepLimits()
        if opts["grammar_cache_bytes"] is None
        else PrepLimits(grammar_cache_bytes=opts["grammar_cache_bytes"])
    )
    trim = TRIM_AFTER_BODY_BYTES if opts["malloc_tuning"] else None
    limits = ServerLimits(prep=prep, trim_after_body_bytes=trim)
    options = ServeOptions((MODEL,), tools, limits=limits)
    state = build_state(AsyncLLMEngine(engine), model_dir, options)
    interval, path = opts["memory_interval"], Path(opts["memory_file"])
    MemorySampler(engine, path, interval, opts["tracemalloc"]).start()
    return serve_forever(state, "127.0.0.1", port, None, "warning")


def mcp_main() -> None:
    from mcp.server.mcpserver import MCPServer

    app = MCPServer("soak", log_level="CRITICAL")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @app.tool()
    def crash() -> str:
        """End this server's process."""
        os._exit(3)

    app.run()


def make_model_dir(root: Path) -> str:
    from augserve.engine.chatml import CHATML_TEMPLATE
    from augserve.engine.make_model import make_model

    d = make_model("llama", "tiny", root / "m", seed=3,
                   overrides={"max_position_embeddings": 4096})  # fmt: skip
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHATML_TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return str(d)


def write_tools(root: Path) -> str:
    mod = "soak_fixture"
    tools = {
        "tools": [
            {"name": "get_weather", "python": f"{mod}:get_weather"},
            {"name": "boom", "python": f"{mod}:boom"},
            {"name": "slow", "python": f"{mod}:slow", "timeout": 1.0},
        ],
        "mcp_servers": [
            {
                "name": "soak",
                "command": sys.executable,
                "args": [__file__, "--mcp"],
                "prefix": "mcp_",
                "timeout": 20,
            }  # fmt: skip
        ],
    }
    path = root / "tools.json"
    path.write_text(json.dumps(tools))
    return str(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--serve", nargs=4, metavar=("PORT", "MODEL_DIR", "TOOLS", "OPTS"))
    p.add_argument("--mcp", action="store_true")
    a = p.parse_args()
    if a.mcp:
        mcp_main()
        return 0
    if a.serve:
        return serve(int(a.serve[0]), a.serve[1], a.serve[2], json.loads(a.serve[3]))
    p.error("--serve or --mcp")
    return 2


if __name__ == "__main__":
    sys.exit(main())
