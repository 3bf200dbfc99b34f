"""A small MCP server for the tests, run over stdio: `python mcp_test_server.py`."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("augserve-test", log_level="CRITICAL")


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


if __name__ == "__main__":
    app.run()
