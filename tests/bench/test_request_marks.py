"""augserve.bench.request_marks: the server-side marks both servers of a comparison
take, on a bare ASGI app (the middleware alone) and through `--middleware`'s loader."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from augserve.bench.request_marks import PATH, MarkStore, RequestMarks, carries_token
from augserve.server.user_middleware import load_middleware


@pytest.mark.parametrize(
    ("chunk", "token"),
    [
        (b'data: {"choices":[{"token_ids":[17],"text":""}]}\n\n', True),
        (b'data: {"choices":[{"token_ids": [ 3, 4]}]}\n\n', True),
        (b'data: {"choices":[{"prompt_token_ids":[1,2],"token_ids":[]}]}\n\n', False),
        (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', False),
        (b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n', True),
        (b'data: {"choices":[{"text":"x","index":0}]}\n\n', True),
        (b"data: [DONE]\n\n", False),
        (b"", False),
    ],
)
def test_a_chunk_carries_a_token_only_with_generated_ids_or_text(chunk: bytes, token: bool) -> None:
    assert carries_token(chunk) is token


def test_the_store_is_bounded_and_keeps_first_marks() -> None:
    store = MarkStore(limit=2)
    store.mark("a", "first", first_only=True)
    t = store.marks["a"]["first"]
    store.mark("a", "first", first_only=True)
    assert store.marks["a"]["first"] == t
    store.mark("b", "body")
    store.mark("c", "body")
    assert list(store.marks) == ["b", "c"]  # the oldest went
    assert set(store.take()) == {"b", "c"} and store.take() == {}
    with pytest.raises(ValueError, match="limit"):
        MarkStore(limit=0)


async def _streaming_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the body, then streams a role chunk, two token chunks and [DONE]."""
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for chunk in (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n',
                  b'data: {"choices":[{"token_ids":[5]}]}\n\n',
                  b'data: {"choices":[{"token_ids":[6]}]}\n\n', b"data: [DONE]\n\n"):  # fmt: skip
        await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def test_marks_are_taken_for_marked_requests_and_read_once() -> None:
    app = RequestMarks(_streaming_app)

    async def run() -> tuple[dict[str, Any], dict[str, Any], float, float]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            before = asyncio.get_running_loop().time()
            r = await client.post("/v1/completions", json={"a": 1},
                                  headers={"x-request-marks-id": "req-1/0"})  # fmt: skip
            assert r.status_code == 200 and r.text.endswith("[DONE]\n\n")
            await client.post("/v1/completions", json={"a": 2})  # no header: not marked
            after = asyncio.get_running_loop().time()
            first = (await client.get(PATH)).json()
            second = (await client.get(PATH)).json()
            return first, second, before, after

    first, second, before, after = asyncio.run(run())
    assert list(first) == ["req-1/0"] and second == {}
    m = first["req-1/0"]
    # the loop's clock is time.monotonic: the marks lie inside the request, in order,
    # and the first token comes after the role chunk (one 10 ms sleep at least)
    assert before <= m["body"] < m["first"] <= m["last"] <= after
    assert m["first"] - m["body"] >= 0.02 and m["last"] - m["first"] >= 0.02


def test_the_loader_takes_classes_and_async_functions_and_names_the_flag() -> None:
    assert load_middleware("augserve.bench.request_marks.RequestMarks") is RequestMarks
    with pytest.raises(ValueError, match="--middleware 'nope.missing.Thing': cannot import"):
        load_middleware("nope.missing.Thing")
    with pytest.raises(ValueError, match="must be a class or an async function"):
        load_middleware("json.dumps")
    with pytest.raises(ValueError, match="expected module.Name"):
        load_middleware("RequestMarks")
