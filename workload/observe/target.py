"""The target and the run's plain inputs, checked before any load starts.

Plain Python (no Locust import), so the CLI and canary can use it without
Locust's gevent monkey-patching.
"""

from __future__ import annotations

from typing import Any

from workload.errors import SetupError

__all__ = ["SetupError", "probe_target"]


def probe_target(
    host: str, api_key: str | None, model: str | None, timeout_s: float = 10.0
) -> dict[str, Any]:
    """GET /v1/models: is this an OpenAI-compatible server, and which model? Raises SetupError."""
    import json
    import urllib.error
    import urllib.request

    url = host.rstrip("/") + "/v1/models"
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
            f"{host} is not an OpenAI-compatible server: GET /v1/models answered HTTP {e.code}{hint}; "
            "point --host at the server's base URL (without /v1)"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise SetupError(
            f"cannot reach {host}: {reason}; is the server running and --host right?"
        ) from None
    try:
        data = json.loads(body)
        models = data["data"]
        ids = [m["id"] for m in models]
    except (ValueError, KeyError, TypeError):
        raise SetupError(
            f"{host} is not an OpenAI-compatible server: GET /v1/models returned {ctype or 'non-JSON'} "
            "without a model list; point --host at the server's base URL (without /v1)"
        ) from None
    if not ids:
        raise SetupError(f"{host} serves no models (GET /v1/models is empty)")
    chosen = model or ids[0]
    if model and model not in ids:
        raise SetupError(f"model {model!r} is not served by {host}; it serves: {', '.join(ids)}")
    entry = next(m for m in models if m["id"] == chosen)
    return {
        "model": chosen,
        "models": ids,
        "max_model_len": entry.get("max_model_len"),
        "root": entry.get("root"),
    }
