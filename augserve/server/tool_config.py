"""The server's tools file (`--tools FILE`, YAML or JSON), validated at start-up.

```yaml
defaults: {timeout: 30, max_concurrency: 8}  # expected_duration: the predictor's global prior
allow_unsafe: false                       # true: allow python: os/subprocess/builtins/... entries
allowed_hosts: [api.example.com]          # hosts HTTP tools may reach
tools:
  - name: get_weather
    description: The weather in a city
    python: my_tools:get_weather           # module:function (sync or async)
    timeout: 5
    expected_duration: 0.3                 # seconds: the call-time predictor's prior
  - name: run_sql
    python: my_tools:run_sql
    isolate: true                          # in a worker process, killed at its timeout
  - name: search
    http: {url: "https://api.example.com/search", method: GET}
    parameters: {type: object, properties: {q: {type: string}}, required: [q]}
mcp_servers:
  - name: files
    command: python                        # stdio ...
    args: [-m, my_mcp_server]
  - name: remote
    url: http://127.0.0.1:8765/mcp         # ... or streamable HTTP
    tools: [search_docs]                   # optional: only these tools
```

Only what this file names can ever run: a request declares tools by name and
schema, and nothing in a request is read as a callable or a URL. `python:` entries
of modules that run programs or load code are refused (`tool_checks.py`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from augserve.server.tool_checks import check_python_target

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(f"{where}: name must match {NAME_RE.pattern}, got {name!r}")
    return name


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{where} must be a number > 0, got {value!r}")
    return float(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an integer >= 1, got {value!r}")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _expand(value: str) -> str:
    """${VAR} from the environment (secrets stay out of the file)."""
    return os.path.expandvars(value)


@dataclass(frozen=True)
class Limits:
    timeout: float = 30.0
    max_concurrency: int = 8
    expected_duration: float | None = None  # seconds: the online predictor's prior

    @classmethod
    def read(cls, d: Mapping[str, Any], base: Limits, where: str) -> Limits:
        timeout = _positive(d.get("timeout", base.timeout), f"{where}.timeout")
        conc = _count(d.get("max_concurrency", base.max_concurrency), f"{where}.max_concurrency")
        expected = d.get("expected_duration", base.expected_duration)
        if expected is not None:
            expected = _positive(expected, f"{where}.expected_duration")
        return cls(timeout, conc, expected)


@dataclass(frozen=True)
class HttpTarget:
    url: str
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()
    allowed_hosts: tuple[str, ...] = ()

    @property
    def host(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()


@dataclass(frozen=True)
class ToolSpec:
    """One tool the server runs itself: a Python callable or an HTTP endpoint."""

    name: str
    limits: Limits
    description: str = ""
    parameters: dict[str, Any] | None = None  # JSON schema; None: from the signature
    python: str | None = None  # "module:function"
    http: HttpTarget | None = None
    isolate: bool = False  # a python tool run in a worker process killed at its timeout


@dataclass(frozen=True)
class McpServerSpec:
    """An MCP server whose tools the server runs (stdio `command` or `url`)."""

    name: str
    limits: Limits
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    tools: tuple[str, ...] | None = None  # only these (None: every listed tool)
    prefix: str = ""  # prepended to the server's tool names
    base_dir: str | None = None  # the tools file's folder (`python` finds modules there)


def _http_target(d: Any, allowed: tuple[str, ...], where: str) -> HttpTarget:
    if not isinstance(d, Mapping) or not isinstance(d.get("url"), str):
        raise ValueError(f"{where}.http must be an object with a 'url'")
    url = d["url"]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{where}.http.url must be an absolute http(s) URL, got {url!r}")
    if "{" in parts.netloc or "{" in parts.scheme:
        raise ValueError(f"{where}.http.url: placeholders are allowed in the path only")
    method = str(d.get("method", "POST")).upper()
    if method not in HTTP_METHODS:
        raise ValueError(f"{where}.http.method must be one of {HTTP_METHODS}, got {method!r}")
    headers = d.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise ValueError(f"{where}.http.headers must be an object")
    hosts = tuple(h.lower() for h in allowed + _strings(d.get("allowed_hosts"), where))
    target = HttpTarget(
        url, method, tuple((str(k), _expand(str(v))) for k, v in headers.items()), hosts
    )
    if target.host not in hosts:
        raise ValueError(
            f"{where}.http.url: host {target.host!r} is not in allowed_hosts {list(hosts)}"
        )
    return target


def _tool(d: Any, defaults: Limits, allowed: tuple[str, ...], i: int, unsafe_ok: bool) -> ToolSpec:
    where = f"tools[{i}]"
    if not isinstance(d, Mapping):
        raise ValueError(f"{where} must be an object")
    name = _check_name(d.get("name"), where)
    where = f"tool {name!r}"
    kinds = [k for k in ("python", "http") if k in d]
    if len(kinds) != 1:
        raise ValueError(f"{where}: give exactly one of 'python' or 'http'")
    params = d.get("parameters")
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(f"{where}.parameters must be a JSON schema object")
    python = d.get("python")
    if python is not None and (not isinstance(python, str) or ":" not in python):
        raise ValueError(f"{where}.python must be 'module:function', got {python!r}")
    if python is not None and not unsafe_ok:
        check_python_target(python, where)
    isolate = d.get("isolate", False)
    if not isinstance(isolate, bool):
        raise ValueError(f"{where}.isolate must be true or false, got {isolate!r}")
    if isolate and python is None:
        raise ValueError(f"{where}.isolate applies to python tools only")
    http = _http_target(d["http"], allowed, where) if "http" in d else None
    if http is not None and params is None:
        params = {"type": "object"}
    return ToolSpec(
        name,
        Limits.read(d, defaults, where),
        str(d.get("description", "")),
        dict(params) if params is not None else None,
        python,
        http,
        isolate,
    )


def _mcp(d: Any, defaults: Limits, i: int) -> McpServerSpec:
    where = f"mcp_servers[{i}]"
    if not isinstance(d, Mapping):
        raise ValueError(f"{where} must be an object")
    name = _check_name(d.get("name"), where)
    command, url = d.get("command"), d.get("url")
    if (command is None) == (url is None):
        raise ValueError(f"{where}: give exactly one of 'command' (stdio) or 'url' (HTTP)")
    if url is not None and urlsplit(str(url)).scheme not in ("http", "https"):
        raise ValueError(f"{where}.url must be an http(s) URL, got {url!r}")
    env = d.get("env") or {}
    if not isinstance(env, Mapping):
        raise ValueError(f"{where}.env must be an object")
    tools = d.get("tools")
    return McpServerSpec(
        name,
        Limits.read(d, defaults, where),
        str(command) if command is not None else None,
        _strings(d.get("args"), f"{where}.args"),
        tuple((str(k), _expand(str(v))) for k, v in env.items()),
        str(d["cwd"]) if d.get("cwd") is not None else None,
        str(url) if url is not None else None,
        _strings(tools, f"{where}.tools") if tools is not None else None,
        str(d.get("prefix", "")),
    )


@dataclass(frozen=True)
class ToolsConfig:
    tools: tuple[ToolSpec, ...] = ()
    mcp_servers: tuple[McpServerSpec, ...] = ()
    max_result_chars: int = 16384  # longer results are cut (and say so)
    defaults: Limits = field(default_factory=Limits)
    base_dir: str | None = None  # the tools file's folder: `python: module:f` looks there
    allow_unsafe: bool = False  # python: entries of os, subprocess, ... (tool_checks.py)

    def module_path(self) -> tuple[str, ...]:
        """Where `python: module:f` tools (and `command: python` MCP servers) find their
        modules besides sys.path: the tools file's folder, then the working directory."""
        return module_path(self.base_dir)

    @classmethod
    def from_dict(cls, d: Any) -> ToolsConfig:
        if not isinstance(d, Mapping):
            raise ValueError("tools file: the top level must be an object")
        known = {"defaults", "allowed_hosts", "tools", "mcp_servers", "max_result_chars"}
        unknown = set(d) - known - {"allow_unsafe"}
        if unknown:
            raise ValueError(f"tools file: unknown keys {sorted(unknown)}")
        unsafe_ok = d.get("allow_unsafe", False)
        if not isinstance(unsafe_ok, bool):
            raise ValueError(f"allow_unsafe must be true or false, got {unsafe_ok!r}")
        defaults = Limits.read(d.get("defaults") or {}, Limits(), "defaults")
        allowed = _strings(d.get("allowed_hosts"), "allowed_hosts")
        tools = d.get("tools") or []
        servers = d.get("mcp_servers") or []
        if not isinstance(tools, list) or not isinstance(servers, list):
            raise ValueError("tools file: 'tools' and 'mcp_servers' must be lists")
        specs = tuple(_tool(t, defaults, allowed, i, unsafe_ok) for i, t in enumerate(tools))
        mcps = tuple(_mcp(s, defaults, i) for i, s in enumerate(servers))
        names = [t.name for t in specs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"tools file: duplicate tool names {sorted(dup)}")
        chars = _count(d.get("max_result_chars", 16384), "max_result_chars")
        return cls(specs, mcps, chars, defaults, allow_unsafe=unsafe_ok)

    @classmethod
    def from_file(cls, path: str | Path) -> ToolsConfig:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"tools file not found: {p}")
        text = p.read_text()
        if p.suffix.lower() == ".json":
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        else:
            import yaml  # type: ignore[import-untyped]

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ValueError(f"{p}: not valid YAML ({exc})") from None
        try:
            cfg = cls.from_dict(data)
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from None
        base = str(p.resolve().parent)
        mcps = tuple(replace(m, base_dir=base) for m in cfg.mcp_servers)
        return replace(cfg, base_dir=base, mcp_servers=mcps)


def module_path(base_dir: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d for d in (base_dir, os.getcwd()) if d))
