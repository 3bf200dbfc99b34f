"""An MCP tool's error text reaches the model, bounded, and the log gets one line per
failed call, not the server's traceback (issue 37). The test MCP server logs as the
SDK does by default (rich tracebacks on stderr) when MCP_TEST_LOG_LEVEL is set."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from augserve.engine.tools import ParsedCall
from augserve.server.mcp_stdio import TracebackFolder
from augserve.server.mcp_tools import ERROR_CHARS
from augserve.server.registered_tool import ToolOutcome
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry

SERVER = Path(__file__).with_name("mcp_test_server.py")


def registry() -> ToolRegistry:
    spec = {
        "name": "notes",
        "command": sys.executable,
        "args": [str(SERVER)],
        "env": {"MCP_TEST_LOG_LEVEL": "INFO"},
        "timeout": 30,
    }
    return ToolRegistry(ToolsConfig.from_dict({"mcp_servers": [spec]}))


def test_mcp_error_text_reaches_the_model_and_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reg = registry()

    async def use() -> list[ToolOutcome]:
        await reg.start()
        try:
            out = [await reg.run(ParsedCall("fail", {"reason": "no note named 'x'"}))]
            out.append(await reg.run(ParsedCall("fail", {"reason": "y" * 5000})))
            out.append(await reg.run(ParsedCall("add", {"a": 1, "b": 2})))
            return out
        finally:
            await reg.close()

    with caplog.at_level(logging.INFO, logger="augserve"):
        crashed, long, added = asyncio.run(use())
    assert crashed.error == "exception" and "ValueError: no note named 'x'" in crashed.text
    assert "Error executing tool fail" in crashed.text
    assert long.error == "exception" and "yyyy" in long.text
    assert len(long.text) < ERROR_CHARS + 200 and "more characters" in long.text
    assert added.text == "3"
    lines = [r.getMessage() for r in caplog.records]
    failed = [m for m in lines if "MCP tool 'fail'" in m]
    assert len(failed) == 2  # one line per failed call
    assert not any("\u2502" in m or "site-packages" in m for m in lines)  # no traceback
    assert sum("Traceback" in m for m in lines) == 0


PLAIN = """Traceback (most recent call last):
  File "tool.py", line 3, in read_note
    raise KeyError(name)
KeyError: 'x'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "sdk.py", line 9, in run
    raise ToolError("Error executing tool read_note")
ToolError: Error executing tool read_note
INFO next record"""


def test_plain_tracebacks_fold_into_their_first_exception() -> None:
    folder = TracebackFolder()
    logged = [out for line in PLAIN.splitlines() for out in folder.feed(line)]
    assert logged == ["KeyError: 'x' (a traceback, folded)", "INFO next record"]
    assert list(folder.errors) == ["KeyError: 'x'"] and folder.count == 1
