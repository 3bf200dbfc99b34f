"""augserve's OpenAI-compatible server (`augserve serve`): FastAPI on uvicorn over
`AsyncLLMEngine`, with tools that run inside the engine (see docs/server.md)."""
