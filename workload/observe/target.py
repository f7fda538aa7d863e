"""The target and the run's plain inputs, checked before any load starts.

Plain Python (no Locust import), so the CLI and canary can use it without
Locust's gevent monkey-patching.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any

from workload.errors import SetupError
from workload.observe.safe import redact_url, redact_urls_in, sanitize

__all__ = ["SetupError", "probe_target"]


def probe_target(
    host: str, api_key: str | None, model: str | None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """GET /v1/models: is this an OpenAI-compatible server, and which model? Raises SetupError."""
    url = host.rstrip("/") + "/v1/models"
    shown = redact_url(host)  # never echo a password from user:pass@host
    req = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            body = r.read()
            ctype = r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        hint = (
            " (check the API key in $OPENAI_API_KEY or --api-key-env)"
            if e.code in (401, 403)
            else ""
        )
        raise SetupError(
            f"{shown} is not an OpenAI-compatible server: GET /v1/models answered HTTP {e.code}{hint}; "
            "point --host at the server's base URL (without /v1)"
        ) from None
    except http.client.HTTPException as e:  # an answer that is not HTTP (BadStatusLine, ...)
        raise SetupError(
            f"{shown} did not answer in HTTP ({type(e).__name__}: "
            f"{redact_urls_in(sanitize(e))[:120]}); is --host the server's http:// base URL?"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = redact_urls_in(sanitize(getattr(e, "reason", e)))
        raise SetupError(
            f"cannot reach {shown}: {reason}; is the server running and --host right?"
        ) from None
    try:
        data = json.loads(body)
        models = data["data"]
        ids = [m["id"] for m in models]
        if not all(isinstance(i, str) for i in ids):
            raise TypeError("model ids must be strings")
    except (ValueError, KeyError, TypeError):
        raise SetupError(
            f"{shown} is not an OpenAI-compatible server: GET /v1/models returned "
            f"{sanitize(ctype)[:80] or 'non-JSON'} "
            "without a model list; point --host at the server's base URL (without /v1)"
        ) from None
    if not ids:
        raise SetupError(f"{shown} serves no models (GET /v1/models is empty)")
    chosen = model or ids[0]
    if model and model not in ids:
        served = ", ".join(sanitize(i)[:200] for i in ids)
        raise SetupError(f"model {sanitize(model)!r} is not served by {shown}; it serves: {served}")
    entry = next(m for m in models if m["id"] == chosen)
    return {
        "model": chosen,
        "models": ids,
        "max_model_len": _context_length(entry.get("max_model_len")),
        "root": entry.get("root") if isinstance(entry.get("root"), str) else None,
    }


def _context_length(value: object) -> int | None:
    """A served max_model_len as a positive int (a digit string too); anything else unknown.
    The server's answer is input like any other: a wrong-typed field must not reach the planner."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
