"""The first hour with tools: a tools file finds its Python modules in its own folder
and the working directory (no PYTHONPATH), `command: python` is this interpreter, an
MCP server that dies at start-up is reported with its own error in a few lines, and
`examples/` (tools module, MCP server, tools file, agent loop) works as shipped."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from conftest import MODEL, LiveServer

from augserve.engine.tools import ParsedCall
from augserve.server.mcp_stdio import resolve_command
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def _start_and_call(registry: ToolRegistry, *calls: ParsedCall) -> list[str]:
    await registry.start()
    try:
        return [(await registry.run(c)).text for c in calls]
    finally:
        await registry.close()


def test_examples_tools_file_runs_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the examples folder, and no PYTHONPATH
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != EXAMPLES])
    monkeypatch.delitem(sys.modules, "my_tools", raising=False)
    registry = ToolRegistry(ToolsConfig.from_file(EXAMPLES / "tools.yaml"))
    texts = asyncio.run(
        _start_and_call(
            registry,
            ParsedCall("calculator", {"expression": "(17 + 25) * 3"}),
            ParsedCall("notes_save_note", {"title": "a", "text": "one two three"}),
            ParsedCall("notes_read_note", {"title": "a"}),
        )
    )
    assert texts == ["126", "saved 'a' (13 characters)", "one two three"]
    assert {"calculator", "get_weather", "utc_now", "notes_word_count"} <= registry.names()


def test_modules_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "cwd_tools_mod.py").write_text(
        "def double(x: int) -> int:\n    return 2 * x\n"
    )
    tools = tmp_path / "conf" / "tools.yaml"
    tools.write_text("tools:\n  - {name: double, python: cwd_tools_mod:double}\n")
    monkeypatch.chdir(tmp_path / "work")
    registry = ToolRegistry(ToolsConfig.from_file(tools))
    assert asyncio.run(_start_and_call(registry, ParsedCall("double", {"x": 21}))) == ["42"]


def test_command_python_is_this_interpreter(tmp_path: Path) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text("mcp_servers:\n  - {name: s, command: python, args: [-m, srv]}\n")
    (spec,) = ToolsConfig.from_file(tools).mcp_servers
    command, env = resolve_command(spec)
    assert command == sys.executable
    assert env is not None and env["PYTHONPATH"].split(":")[0] == str(tmp_path)


def test_a_failed_mcp_start_shows_the_childs_error(tmp_path: Path) -> None:
    (tmp_path / "broken_srv.py").write_text(
        "import sys\nprint('starting up', file=sys.stderr)\n"
        "raise RuntimeError('the database at /nope is gone')\n"
    )
    tools = tmp_path / "tools.yaml"
    tools.write_text("mcp_servers:\n  - {name: db, command: python, args: [-m, broken_srv]}\n")
    registry = ToolRegistry(ToolsConfig.from_file(tools))
    with pytest.raises(ValueError) as info:
        asyncio.run(_start_and_call(registry))
    msg = str(info.value)
    assert msg.startswith("MCP server 'db' (python -m broken_srv): cannot connect")
    assert "RuntimeError: the database at /nope is gone" in msg
    assert len(msg.splitlines()) <= 8 and info.value.__cause__ is None


def test_agent_loop_example_runs(server: LiveServer) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import agent_loop
    finally:
        sys.path.remove(str(EXAMPLES))
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    answer = agent_loop.run(client, MODEL, "hi", max_turns=2)
    assert isinstance(answer, str)
