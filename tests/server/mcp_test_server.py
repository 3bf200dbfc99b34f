"""A small MCP server for the tests: `python mcp_test_server.py` (stdio) or
`python mcp_test_server.py --http PORT` (streamable HTTP on 127.0.0.1:PORT/mcp)."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("augserve-test", log_level=os.environ.get("MCP_TEST_LOG_LEVEL", "CRITICAL"))


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper() + "!"


@app.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@app.tool()
def crash() -> str:
    """Ends the server process (tests of the supervisor)."""
    import os

    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        app.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
