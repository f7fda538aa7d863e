"""One GET for start-up and background probes (urllib, one request at a time).

The API key goes into the Authorization header and nowhere else: never into a returned
reason, a sample, an error string or a log line.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request


def http_get(
    base_url: str, path: str, api_key: str | None, timeout_s: float
) -> tuple[int | None, bytes | str]:
    """(status, body) on an HTTP answer, (None, reason) when nothing usable came back."""
    req = urllib.request.Request(base_url.rstrip("/") + path, method="GET")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", e)
        return None, f"{type(e).__name__}: {reason}"
