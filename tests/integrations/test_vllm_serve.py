"""`augserve serve --engine vllm` end to end (vLLM's venv only: run_plugin_tests.sh).

One server launch in a child process: our OpenAI server over vLLM's AsyncLLM with
AugServeScheduler inside, a small random-weight llama whose tokenizer has
`<tool_call>` and `</tool_call>` as single tokens (as Qwen's and Hermes' have), and
a logits processor that forces scripted tokens for chosen seeds
(vllm_script_lp.py; random weights never call a tool). Parsing, the pause in
vLLM's streaming session, the server-side call, the resumed generation, the
client call, the session's next turn and /metrics are the real code paths.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import httpx  # noqa: E402

from tests.integrations.server_wait import wait_healthy  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = "test-model"
BLOCKS, BLOCK = 80, 32
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "HF_HUB_OFFLINE": "1",
}
USER = [{"role": "user", "content": "Weather in Paris?"}]
SHIP = {
    "type": "function",
    "function": {
        "name": "ship_order",
        "description": "Ship an order.",
        "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}},
    },
}


def call_text(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def tool_model(out: Path) -> Path:
    """make_model's small llama, its vocabulary grown by the two tool tokens."""
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as HF

    from augserve.engine.chatml import CHATML_TEMPLATE
    from augserve.engine.make_model import make_model

    big = {"max_position_embeddings": 4096, "tie_word_embeddings": False}
    d = make_model("llama", "small", out, seed=3, overrides=big)
    hf = HF.from_file(str(d / "tokenizer.json"))
    vocab = hf.get_vocab_size()
    hf.add_tokens([AddedToken(t, normalized=False) for t in ("<tool_call>", "</tool_call>")])
    hf.save(str(d / "tokenizer.json"))
    weights = load_file(str(d / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    for name, w in weights.items():
        if w.dim() == 2 and w.shape[0] == vocab:  # the embedding and the LM head
            weights[name] = torch.cat([w, 0.02 * torch.randn(2, w.shape[1], generator=gen)])
    save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
    for name, patch in (("config.json", {"vocab_size": vocab + 2}),
                        ("tokenizer_config.json", {"chat_template": CHATML_TEMPLATE})):  # fmt: skip
        cfg = json.loads((d / name).read_text())
        (d / name).write_text(json.dumps({**cfg, **patch}))
    return d


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path, scripts: dict) -> None:
        self.proc, self.url, self.log, self.scripts = proc, url, log, scripts

    def chat(self, **body: Any) -> httpx.Response:
        headers = body.pop("headers", {})
        return httpx.post(self.url + "/v1/chat/completions", json={"model": MODEL, **body},
                          headers=headers, timeout=120)  # fmt: skip

    def metric(self, name: str, **labels: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.url + "/metrics", timeout=10).text
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and s.labels == labels:
                    return float(s.value)
        return 0.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from augserve.engine.tokenizer import Tokenizer

    tmp = tmp_path_factory.mktemp("vllm-serve")
    model = tool_model(tmp / "m")
    tok = Tokenizer(model)

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    scripts = {
        101: [enc(call_text("slow_weather", seconds=1.0)), enc("It is sunny.")],
        102: [enc(call_text("get_weather", city="Paris")), enc("Mild.")],
        201: [enc(call_text("ship_order", order=7))],
        202: [enc("Shipped.")],
    }
    (tmp / "scripts.json").write_text(json.dumps(scripts))
    tools = {"tools": [{"name": "get_weather", "python": "augserve_test_tools:get_weather"},
                       {"name": "slow_weather", "python": "augserve_test_tools:sleepy",
                        "timeout": 30}]}  # fmt: skip
    (tmp / "tools.json").write_text(json.dumps(tools))
    port = _port()
    vllm_args = {"enforce_eager": True, "logits_processors": ["vllm_script_lp:ScriptLP"],
                 "additional_config": {"augserve": {"decision_log": 100}}}  # fmt: skip
    cmd = [sys.executable, "-m", "augserve", "serve", "--engine", "vllm", "--model", str(model),
           "--served-model-name", MODEL, "--tools", str(tmp / "tools.json"),
           "--port", str(port), "--block-size", str(BLOCK), "--num-device-blocks", str(BLOCKS),
           "--max-model-len", "2048", "--max-num-batched-tokens", "2048",
           "--tool-call-parser", "hermes", "--allow-scripted-tools",
           "--middleware", "augserve.bench.request_marks.RequestMarks",
           "--vllm-args", json.dumps(vllm_args)]  # fmt: skip
    path = os.pathsep.join([str(ROOT), str(HERE), str(ROOT / "tests" / "server")])
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in VLLM_ENV.items()},
           "PYTHONPATH": path, "AUGSERVE_VLLM_SCRIPTS": str(tmp / "scripts.json")}  # fmt: skip
    log = tmp / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, log)
    yield Server(proc, url, log, scripts)
    proc.terminate()
    proc.wait(60)


def test_a_server_side_call_runs_while_the_request_waits_inside_vllm(server: Server) -> None:
    seen_paused: list[float] = []
    done = threading.Event()

    def watch() -> None:  # the call sleeps a whole second: the pause shows on /metrics
        while not done.is_set() and not seen_paused:
            paused = server.metric("augserve_num_requests", state="paused")
            if paused:
                seen_paused.append(paused)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        resp = server.chat(messages=USER, seed=101, max_tokens=200, tool_trace=True,
                           server_tools=["slow_weather"])  # fmt: skip
    finally:
        done.set()
        watcher.join()
    assert resp.status_code == 200, resp.text
    body = resp.json()
    choice = body["choices"][0]
    assert choice["message"]["content"] == "It is sunny." and choice["finish_reason"] == "stop"
    (step,) = choice["tool_trace"]
    assert step["name"] == "slow_weather" and step["arguments"] == {"seconds": 1.0}
    assert step["result"] == "woke up" and step["error"] is None and step["duration"] >= 0.95
    assert seen_paused == [1.0]
    # the call's tokens, the answer's and the EOS; the tool result is context, not completion
    turns = server.scripts[101]
    assert body["usage"]["completion_tokens"] == len(turns[0]) + len(turns[1]) + 1
    # the pause was one of vLLM's streaming session, decided by our scheduler inside vLLM
    pauses = [ln for ln in server.log.read_text().splitlines() if "augserve: pause" in ln]
    mine = [ln for ln in pauses if body["id"] in ln]
    assert mine and all(ln.split(": ")[-1].split(",")[0] in ("preserve", "discard") for ln in mine)


def test_streamed_answer_after_a_server_side_call(server: Server) -> None:
    body = {"model": MODEL, "messages": USER, "seed": 102, "max_tokens": 200, "stream": True,
            "server_tools": ["get_weather"]}  # fmt: skip
    text, finals = "", []
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for c in json.loads(line[6:])["choices"]:
                text += c["delta"].get("content") or ""
                if c.get("finish_reason"):
                    finals.append(c["finish_reason"])
    assert text == "Mild." and finals == ["stop"]


def test_a_client_call_then_the_sessions_next_turn_reuses_its_kv(server: Server) -> None:
    session = {"X-Session-ID": "conv-7"}
    first = server.chat(messages=USER, tools=[SHIP], seed=201, max_tokens=200, headers=session)
    assert first.status_code == 200, first.text
    choice = first.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (tc,) = choice["message"]["tool_calls"]
    assert tc["function"]["name"] == "ship_order"
    assert json.loads(tc["function"]["arguments"]) == {"order": 7}
    result = {"role": "tool", "tool_call_id": tc["id"], "content": '{"status": "ok"}'}
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [tc]}, result]
    second = server.chat(messages=history, tools=[SHIP], seed=202, max_tokens=50, headers=session)
    assert second.status_code == 200, second.text
    body = second.json()
    assert body["choices"][0]["message"]["content"] == "Shipped."
    prompt_1 = first.json()["usage"]["prompt_tokens"]
    cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= (prompt_1 // BLOCK) * BLOCK > 0  # the first turn's context, from vLLM


def test_a_scripted_plan_runs_its_segments_and_calls_in_one_vllm_session(server: Server) -> None:
    plan = [{"output_len": 4, "call_time": 0.3, "return_len": 6}, {"output_len": 3}]
    body = {"model": MODEL, "prompt": list(range(5, 45)), "temperature": 0.0,
            "augserve_segments": plan, "return_token_ids": True}  # fmt: skip
    resp = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and len(choice["token_ids"]) == 7  # EOS ignored
    t = choice["augserve_timing"]
    assert (t["generated_tokens"], t["returned_tokens"]) == (7, 6)
    (call,) = t["calls"]
    assert call["returned_tokens"] == 6 and call["end"] - call["start"] >= 0.29
    assert 0 <= t["first_token"] <= call["start"] and call["end"] <= t["finish"]


def test_the_benchmarks_marks_middleware_times_a_stream_on_the_server(server: Server) -> None:
    body = {"model": MODEL, "prompt": list(range(5, 45)), "max_tokens": 6, "stream": True,
            "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}  # fmt: skip
    before = time.monotonic()
    headers = {"x-request-marks-id": "marked/0"}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=headers,
                      timeout=120) as r:  # fmt: skip
        assert r.status_code == 200
        ids = [i for line in r.iter_lines() if line.startswith("data: {")
               for i in json.loads(line[6:])["choices"][0].get("token_ids") or []]  # fmt: skip
    after = time.monotonic()
    marks = httpx.get(server.url + "/request-marks", timeout=10).json()
    assert len(ids) == 6 and list(marks) == ["marked/0"]  # unmarked requests are not kept
    m = marks["marked/0"]
    assert before <= m["body"] < m["first"] <= m["last"] <= after


def test_what_is_not_mapped_is_a_400_naming_it(server: Server) -> None:
    resp = server.chat(messages=USER, max_tokens=5, response_format={"type": "json_object"})
    assert resp.status_code == 400
    assert "--engine vllm" in resp.json()["error"]["message"]


def test_metrics_report_vllm_and_the_server(server: Server) -> None:
    assert server.metric("augserve_kv_blocks_total", location="device") == BLOCKS
    assert server.metric("augserve_tool_calls_total", tool="slow_weather") == 1
    assert server.metric("augserve_tool_calls_total", tool="get_weather") == 1
    assert server.metric("augserve_client_tool_calls_total") == 1
    assert server.metric("augserve_requests_finished_total", finish_reason="stop") >= 3
    assert server.metric("augserve_requests_finished_total", finish_reason="tool_calls") == 1
    assert server.metric("augserve_prefix_cache_hits_total") > 0
    assert server.metric("augserve_num_requests", state="paused") == 0
    assert server.metric("augserve_engine_healthy") == 1
