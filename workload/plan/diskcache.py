"""A small on-disk cache for what every planning process derives the same way.

Each `agentload run` plans traffic in two processes (the pre-flight check and the Locust
child), and a canary runs it once per block and side. What they derive from installed
packages alone (the parsed tokenizer, the prompt text pool) is kept in the user's cache
directory (`$XDG_CACHE_HOME/agentload`, else `~/.cache/agentload`). A file is named by a
digest of everything that produced it (package versions, Python, the producing source);
it carries a digest of its own content, is written whole or not at all, and is simply
ignored (and rewritten) when it does not check out. Any failure means no cache, never an
error: the caller derives the value afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

_DIGEST = 32


def versions(*dists: str) -> tuple[str, ...]:
    """Installed versions of `dists` ("-" for one that is missing), for cache keys."""
    out = []
    for dist in dists:
        try:
            out.append(metadata.version(dist))
        except metadata.PackageNotFoundError:
            out.append("-")
    return tuple(out)


def path_for(kind: str, name: str, key: object) -> Path | None:
    """The cache file for `name` of `kind`, given everything that produced it (`key`);
    None where there is no cache directory (no $XDG_CACHE_HOME and no home directory, as
    in a container running under an arbitrary user id)."""
    digest = hashlib.blake2b(repr((key, sys.version)).encode(), digest_size=8).hexdigest()
    try:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except (RuntimeError, KeyError, OSError):
        return None
    return root / "agentload" / kind / f"{name}-{digest}"


def read(path: Path | None) -> bytes | None:
    """The file's content if it is there and checks out; else None."""
    if path is None:
        return None
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    body = blob[_DIGEST:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != blob[:_DIGEST]:
        return None
    return body


def write(path: Path | None, body: bytes) -> None:
    """Store `body` at `path` atomically; a cache that cannot be written is no cache."""
    if path is None:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(hashlib.blake2b(body, digest_size=_DIGEST).digest() + body)
        os.replace(tmp, path)  # whole or not at all: readers never see half a file
        _prune(path)
    except OSError:
        pass
    finally:  # a failed write or a Ctrl-C in the middle leaves no partial file behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def load(path: Path | None) -> Any:
    """The value `store` kept at `path` (marshal: plain data only), or None."""
    body = read(path)
    if body is None:
        return None
    try:
        return marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None


def store(path: Path | None, value: Any) -> None:
    """Keep plain data (str, bytes, numbers, lists, tuples, dicts) at `path`."""
    if path is not None:
        write(path, marshal.dumps(value))


def _prune(path: Path) -> None:
    """Remove the files an earlier version left for the same name (they are never read)."""
    prefix = path.name.rsplit("-", 1)[0] + "-"
    for old in path.parent.glob(f"{prefix}*"):
        if old != path and not old.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                old.unlink()
