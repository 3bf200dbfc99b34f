"""Tenants: the API keys a server accepts, and what each request's key scopes.

With keys set (`--api-key`, repeatable, and `--api-key-file`, one key a line), every
endpoint but `/health`, `/ping`, `/metrics` and `/version` needs one
(`APIKeyMiddleware`); the key's tenant, a hash of it, goes into the request's ASGI
scope. A request's `cache_salt` for the engine is a hash of its tenant and of the
`cache_salt` field it may send itself (as vLLM's): it starts the block hash chain
of the prefix cache and scopes the paused client sessions (`sched/prefix_cache.py`,
`sched/sessions.py`), so `cached_tokens` never reveals another tenant's prompt and
one tenant can neither continue nor end another's session. Without keys, requests
share one tenant and only their `cache_salt` fields set them apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TENANT = "augserve.tenant"  # the key of the request's tenant in its ASGI scope
OPEN_PATHS = frozenset({"/health", "/ping", "/metrics", "/version"})


def tenant_of_key(key: str) -> str:
    """A key's tenant: a hash that names it without revealing it."""
    return hashlib.sha256(b"augserve-tenant\0" + key.encode("utf-8")).hexdigest()[:32]


def request_salt(tenant: str | None, salt: str | None) -> str | None:
    """The engine's salt for a request of `tenant` that sent `cache_salt` `salt`."""
    if tenant is None and salt is None:
        return None
    text = f"{tenant or ''}\0{salt or ''}".encode()
    return hashlib.sha256(text).hexdigest()[:32]


def with_tenant(req: Any, http: Any) -> Any:
    """`req` with its `cache_salt` replaced by the engine's salt of its tenant."""
    salt = request_salt(http.scope.get(TENANT), req.cache_salt)
    return req.model_copy(update={"cache_salt": salt}) if salt != req.cache_salt else req


def read_key_file(path: str | Path) -> list[str]:
    """The keys of a key file: one a line; blank lines and `#` comments are skipped.
    ValueError naming the file when it cannot be read or holds no key."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--api-key-file {path}: cannot read it ({exc})") from None
    keys = [ln.strip() for ln in text.splitlines()]
    keys = [k for k in keys if k and not k.startswith("#")]
    if not keys:
        raise ValueError(f"--api-key-file {path}: it holds no key")
    return keys


def api_keys(keys: Iterable[str] | str | None) -> tuple[str, ...]:
    """The keys, in order, without repeats; ValueError for an empty or spaced key."""
    if keys is None:
        return ()
    items = [keys] if isinstance(keys, str) else list(keys)
    for k in items:
        if not k or k != k.strip() or any(c.isspace() for c in k):
            raise ValueError("an API key must be non-empty and hold no whitespace")
    return tuple(dict.fromkeys(items))
