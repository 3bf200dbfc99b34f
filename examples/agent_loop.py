"""An agent loop with the plain `openai` client against `augserve serve`.

    augserve serve --model DIR --tools examples/tools.yaml --port 8000
    python examples/agent_loop.py "What is (17 + 25) * 3, and the weather in Paris?"

The server's own tools (tools.yaml) run inside the engine: the model's calls to them
never reach this client. A request sees them only when it asks (`server_tools`:
names, or "all"; docs/server.md, "Which tools a request is offered"). The one tool
declared here, `ask_user`, is the client's: its calls come back as `tool_calls`, the
loop runs it and sends the result back.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from openai import OpenAI

CLIENT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ask_user",
            "description": "Ask the user a question and get the answer.",
            "parameters": {
                "type": "object",
                "properties": {"question": {"type": "string"}},
                "required": ["question"],
            },
        },
    }
]


def ask_user(question: str) -> str:
    return input(f"[model asks] {question}\n> ")


def run(client: OpenAI, model: str, prompt: str, max_turns: int = 8) -> str:
    messages: list[Any] = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        resp = client.chat.completions.create(
            model=model,
            messages=messages,
            tools=CLIENT_TOOLS,
            max_tokens=512,
            extra_body={"server_tools": "all"},  # and every tool of the server's
        )
        msg = resp.choices[0].message
        if not msg.tool_calls:
            return msg.content or ""
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments or "{}")
            result = ask_user(**args) if call.function.name == "ask_user" else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return f"(no answer after {max_turns} turns)"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("prompt")
    p.add_argument(
        "--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    )
    p.add_argument("--model", default=None, help="default: the server's first model")
    a = p.parse_args()
    client = OpenAI(base_url=a.base_url, api_key=os.environ.get("AUGSERVE_API_KEY", "none"))
    model = a.model or client.models.list().data[0].id
    print(run(client, model, a.prompt))


if __name__ == "__main__":
    main()
