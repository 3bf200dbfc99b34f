"""The same agent with the OpenAI Agents SDK (`pip install openai-agents`), whose
default model speaks the Responses API (`/v1/responses`).

    augserve serve --model DIR --tools examples/tools.yaml --port 8000
    python examples/agents_sdk.py "What time is it in UTC, and what is 6 * 7?"

Server-side tools (tools.yaml) run inside augserve, offered to the model because the
requests ask for them (`server_tools: "all"`, below); `local_greeting` is a function
tool the SDK runs in this process.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI


@function_tool
def local_greeting(name: str) -> str:
    """Greet someone by name."""
    return f"Hello, {name}!"


async def main(prompt: str) -> None:
    set_tracing_disabled(True)  # no trace upload: there is no OpenAI account here
    base_url = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    client = AsyncOpenAI(base_url=base_url, api_key=os.environ.get("AUGSERVE_API_KEY", "none"))
    model = (await client.models.list()).data[0].id
    agent = Agent(
        name="assistant",
        instructions="Use the tools when they help. Answer briefly.",
        tools=[local_greeting],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=ModelSettings(extra_body={"server_tools": "all"}),
    )
    result = await Runner.run(agent, prompt)
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "Greet Ada."))
