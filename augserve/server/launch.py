"""Building a server from its settings, and running it on uvicorn.

`load_tools` reads and checks the tools file, imports its Python tools and checks its
MCP commands: `augserve serve` calls it before the model loads, so that a typo is one
line at once. `build_state` loads the chat template, the tool parser (and the tools,
unless given) and the metrics around an engine. `serve_forever` runs uvicorn in the
foreground. The first SIGINT or SIGTERM starts the drain: /health answers 503 at once
and new requests get 503, while the listener stays open; running requests get
`shutdown_grace` seconds, the rest are aborted (their clients get finish_reason
"abort"); then the listener closes, the answers still being sent get up to
`shutdown_grace` seconds more to reach their clients, the engine stops, the MCP servers
and tool workers close, and the process exits 0. A second signal exits at once (status
128 + the signal). Slow clients: a request head must arrive within `read_timeout`
seconds, each body part too; a keep-alive connection idle for `idle_timeout` seconds is
closed.
`BackgroundServer` runs the same server in a thread (tests, notebooks).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import uvicorn

from augserve.core.metrics import SLOConfig
from augserve.engine.chat import ChatTemplate
from augserve.engine.chatml import CHATML_TEMPLATE
from augserve.engine.tool_parsers import PARSER_CHOICES, detect_tool_parser
from augserve.server import scripted
from augserve.server.app import create_app, drain
from augserve.server.health import HealthCollector
from augserve.server.metrics import ServerMetrics
from augserve.server.middleware import timed_protocol
from augserve.server.predictions import apply_tool_priors, engine_pace
from augserve.server.preparation import PrepCollector
from augserve.server.state import ServerLimits, ServerState
from augserve.server.tool_checks import check_commands
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import OFFER_MODES, ToolRegistry

log = logging.getLogger("augserve.server")
# the listening sockets of the servers this process runs: a fork of the process (a tool
# calling os.fork) closes them at once, so that no child can hold the port after we exit
_LISTENERS: set[int] = set()


def _close_listeners() -> None:
    for fd in _LISTENERS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _LISTENERS.clear()


os.register_at_fork(after_in_child=_close_listeners)


@dataclass(frozen=True)
class ServeOptions:
    """The server's own settings (the engine's are `EngineArgs`)."""

    served_model_names: tuple[str, ...]
    tools_file: str | None = None
    chat_template: str | None = None  # a template file overriding the model's
    tool_call_parser: str | None = None  # None or "auto": from the template's markers
    limits: ServerLimits = ServerLimits()
    slo: SLOConfig = SLOConfig(norm_latency_slo=0.1, ttft_slo=1.0)
    allow_scripted_tools: bool = False  # accept scripted tool plans (server/scripted.py)
    offer_server_tools: str = "request"  # or "always" (`ToolRegistry`)

    def __post_init__(self) -> None:
        if self.chat_template is not None and not Path(self.chat_template).is_file():
            raise ValueError(f"--chat-template: no such file {self.chat_template!r}")
        if self.offer_server_tools not in OFFER_MODES:
            raise ValueError(
                f"offer_server_tools must be one of {OFFER_MODES}, got {self.offer_server_tools!r}"
            )
        if not self.served_model_names or not all(self.served_model_names):
            raise ValueError("served_model_names must hold at least one non-empty name")
        if self.tool_call_parser is not None and self.tool_call_parser not in PARSER_CHOICES:
            raise ValueError(
                f"tool_call_parser must be one of {list(PARSER_CHOICES)}, "
                f"got {self.tool_call_parser!r}"
            )


def load_template(model_dir: str | Path, override: str | None) -> ChatTemplate:
    if override is not None:
        return ChatTemplate.from_file(override, model_dir)
    tpl = ChatTemplate.from_model_dir(model_dir, fallback=CHATML_TEMPLATE)
    if tpl.source is CHATML_TEMPLATE:
        log.warning("%s has no chat template; using augserve's ChatML template", model_dir)
    return tpl


def load_tools(tools_file: str | None, offer: str = "request") -> ToolRegistry:
    """The tools file read and checked, its Python tools imported and their schemas
    checked, its stdio MCP commands found (ValueError/OSError naming the problem);
    MCP servers connect later, in the server's loop (`ToolRegistry.start`)."""
    config = ToolsConfig.from_file(tools_file) if tools_file else ToolsConfig()
    check_commands(config)
    return ToolRegistry(config, offer)


def build_state(
    aengine: Any, model_dir: str | Path, opts: ServeOptions, registry: ToolRegistry | None = None
) -> ServerState:
    """Everything but the engine itself, which the caller builds (`build_engine`), and
    the tools, which it may have loaded first (`load_tools`)."""
    template = load_template(model_dir, opts.chat_template)
    parser = opts.tool_call_parser
    if parser is None or parser == "auto":
        parser = detect_tool_parser(template.source)
        log.info("tool call parser: %s (from the chat template's markers)", parser)
    template = replace(template, tool_format=parser)
    if not template.renders_tools:
        log.warning(
            "the chat template renders no tools: requests with tools get augserve's generic "
            "tools prompt (each tool's name, description and schema, %s call format)",
            parser,
        )
    if registry is None:
        registry = load_tools(opts.tools_file, opts.offer_server_tools)
    engine = aengine.engine
    apply_tool_priors(engine.predictor, registry.config)
    engine.grammar_cache_bytes = opts.limits.prep.grammar_cache_bytes
    metrics = ServerMetrics(
        aengine.stats,
        opts.slo,
        engine.predictor,
        lambda: getattr(engine, "latency_source", "default"),
        lambda: engine_pace(engine),
    )
    state = ServerState(
        aengine,
        template,
        parser,
        registry,
        metrics,
        opts.served_model_names,
        opts.limits,
    )
    if opts.allow_scripted_tools:
        scripted.install(state)
    metrics.registry.register(HealthCollector(state))
    metrics.registry.register(PrepCollector(state.preparer, engine))
    return state


class GracefulServer(uvicorn.Server):
    """uvicorn, with the engine drained before the listener closes, and our own signal
    handling (the module doc): uvicorn re-raises the signal after a clean shutdown
    (exit status 143 for SIGTERM) and ignores a second SIGTERM."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self.signals = 0
        self.listen_fds: set[int] = set()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        servers = getattr(self, "servers", [])
        self.listen_fds = {s.fileno() for srv in servers for s in (srv.sockets or ())}
        _LISTENERS.update(self.listen_fds)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        sigs = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in sigs}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.signals += 1
        name = signal.Signals(sig).name
        if self.signals > 1:
            log.warning("%s again: exiting now", name)
            self.state.registry.kill_workers()
            os._exit(128 + sig)
        log.info("%s: draining, then exiting (send it again to exit at once)", name)
        self.state.draining = True  # /health says 503 from now on
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await drain(self.state, self.state.limits.shutdown_grace)  # the listener is open
        _LISTENERS.difference_update(self.listen_fds)  # they close now (their numbers go)
        await super().shutdown(sockets)


def _config(app: Any, host: str, port: int, log_level: str, state: ServerState) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        # answers already made get the grace to reach their clients (a client that stops
        # reading is ended by `write_timeout`): a reader slower than the engine is not cut
        timeout_graceful_shutdown=max(5, round(state.limits.shutdown_grace)),
        timeout_keep_alive=state.limits.idle_timeout,  # type: ignore[arg-type]
        http=timed_protocol(state.limits.read_timeout),
        access_log=False,
    )


def serve_forever(
    state: ServerState,
    host: str,
    port: int,
    api_key: str | Sequence[str] | None,
    log_level: str = "info",
    middleware: Sequence[Any] = (),
) -> int:
    app = create_app(state, api_key, middleware)
    server = GracefulServer(_config(app, host, port, log_level, state), state)
    server.run()
    return 0 if server.started else 1


class BackgroundServer:
    """A live server on `host`:`port` (0: an ephemeral port) in a daemon thread."""

    def __init__(
        self,
        state: ServerState,
        api_key: str | Sequence[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        middleware: Sequence[Any] = (),
    ) -> None:
        self.state = state
        app = create_app(state, api_key, middleware)
        self.server = GracefulServer(_config(app, host, port, log_level, state), state)
        self.thread = threading.Thread(target=self.server.run, name="augserve-server", daemon=True)
        self.host = host

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 120.0) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start (see its log)")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError("the server did not stop in time")
