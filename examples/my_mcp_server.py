"""An example MCP server (stdio), written against the `mcp` package augserve depends on
(mcp>=2: `mcp.server.mcpserver.MCPServer`). tools.yaml starts it with
`command: python` (augserve's own interpreter) and `args: [-m, my_mcp_server]`;
the tools file's folder is on its PYTHONPATH.

Run alone to try it: `python my_mcp_server.py` (it speaks MCP on stdin/stdout).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("augserve-example", log_level="WARNING")

NOTES: dict[str, str] = {}


@app.tool()
def save_note(title: str, text: str) -> str:
    """Save a note under a title."""
    NOTES[title] = text
    return f"saved {title!r} ({len(text)} characters)"


@app.tool()
def read_note(title: str) -> str:
    """Read the note saved under a title."""
    if title not in NOTES:
        raise ValueError(f"no note {title!r}; saved: {sorted(NOTES)}")
    return NOTES[title]


@app.tool()
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


if __name__ == "__main__":
    app.run()
