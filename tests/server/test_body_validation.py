"""Large bodies are validated off the event loop (`server/strict_json.py`): pydantic
validation of a big request ran on the loop (40,000 messages: 170 ms), holding the
GIL, and /health waited. Shown by events: the messages' validator is held mid-way
on an Event (a validation as long as the test wants) while /health is asked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, start_server

from augserve.server import strict_json
from augserve.server.protocol import ChatCompletionRequest, Message

HOLD_AT = 1000  # the validator call (message) at which the validation is held


class HoldValidation:
    """A profile hook (`threading.setprofile`) that sees each call of `Message`'s
    validator, notes its thread, and holds the `HOLD_AT`-th until released."""

    def __init__(self) -> None:
        self.armed = False
        self.calls = 0
        self.threads: set[str] = set()
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if not self.armed or event != "call" or code.co_name != "_has_content":
            return
        self.threads.add(threading.current_thread().name)
        self.calls += 1
        if self.calls == HOLD_AT:
            self.held.set()
            assert self.release.wait(120), "the test never released the validation"


@pytest.fixture(scope="module")
def hooked(chat_model_dir: Path) -> Iterator[tuple[LiveServer, HoldValidation]]:
    hook = HoldValidation()
    threading.setprofile(hook)  # the threads started from now: the server's and its pools
    srv = start_server(chat_model_dir)
    yield srv, hook
    srv.stop()
    threading.setprofile(None)  # type: ignore[arg-type]


def _messages(n: int, bad_at: int | None = None) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"note {k}"} for k in range(n)]
    if bad_at is not None:
        msgs[bad_at] = {"role": "user"}  # no content: the validator's 400
    return msgs


def _chat(srv: LiveServer, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 1}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)


def test_health_answers_while_a_large_body_is_validated(
    hooked: tuple[LiveServer, HoldValidation],
) -> None:
    """Held in the middle of validating 3,000 messages (a 100 KB body), the server
    answers /health: the validation runs on a preparation thread, not the loop (on
    the loop, /health waited for it: here it would time out)."""
    srv, hook = hooked
    messages = _messages(3000)
    hook.armed = True
    out: list[httpx.Response] = []
    t = threading.Thread(target=lambda: out.append(_chat(srv, messages)), daemon=True)
    t.start()
    try:
        assert hook.held.wait(60), "the body was never validated"
        health = httpx.get(srv.url + "/health", timeout=10).status_code
        assert not out  # the request is still being validated
    finally:
        hook.release.set()
    t.join(120)
    hook.armed = False
    assert health == 200
    assert hook.threads and all(n.startswith("augserve-prep") for n in hook.threads), hook.threads
    assert out and out[0].status_code in (200, 400), out  # served, or over the context


def test_a_bad_item_in_a_large_body_is_named_as_in_a_small_one(
    hooked: tuple[LiveServer, HoldValidation],
) -> None:
    srv, _ = hooked
    small = _chat(srv, _messages(3, bad_at=1)).json()["error"]
    large = _chat(srv, _messages(3000, bad_at=2001)).json()["error"]
    assert small["param"] == "messages.1" and large["param"] == "messages.2001"
    assert large["message"] == small["message"].replace("messages.1", "messages.2001")


def test_validate_in_pieces_is_the_whole_validation() -> None:
    """Piece boundaries (PIECE items a call) change nothing in the result."""
    for n in (1, strict_json.PIECE, strict_json.PIECE + 1, 3 * strict_json.PIECE + 7):
        body = {"model": "m", "messages": _messages(n), "temperature": 0.5}
        got = strict_json.validate_in_pieces(ChatCompletionRequest, body)
        assert got == ChatCompletionRequest.model_validate(body)
        assert all(isinstance(m, Message) for m in got.messages) and len(got.messages) == n
