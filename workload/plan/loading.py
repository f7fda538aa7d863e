"""Loading profiles: built-in names or files, ``extends``, migrations, ``--set`` overrides.

``extends: NAME_OR_PATH`` deep-merges this file over another profile (mappings
merge key by key; lists and scalars replace). ``load_profile(..., overrides=
["classes.agent.weight=3"])`` applies ``--set`` overrides (YAML-typed values)
after that. Problems are collected into ``ProfileError.problems``, one line
each naming the file, the field path and what is allowed
(``workload.plan.profile_errors`` words pydantic's errors).

Built-in profiles are the YAML files in the top-level ``profiles/`` folder, the
only copy in the tree; the wheel ships them as the package data
``workload.builtin_profiles``. The format itself is documented in
``workload.plan.profile``.
"""

from __future__ import annotations

import copy
import difflib
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from workload.errors import ProfileError, ProfileTextError
from workload.plan.profile import SCHEMA_VERSION, Profile
from workload.plan.profile_errors import located_errors
from workload.plan.yamlread import decode, read_yaml_text

# Where each value came from: key path -> "file:line" or "--set path=value".
Origins = dict[tuple[str, ...], str]

DEFAULT_PROFILE = "quickstart"
MAX_PROFILE_BYTES = 1 << 20  # also enforced by workload.plan.yamlread
MAX_EXTENDS_DEPTH = 16

# Old schema versions that still load: version -> function(raw dict) -> raw dict one
# version newer. Empty while there is only version 1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def _builtin_dir() -> Path:
    """The one copy of the built-in profiles: profiles/ in a checkout, the package data
    `workload.builtin_profiles` (the same files) in an installed wheel."""
    tree = Path(__file__).resolve().parents[2] / "profiles"
    if (tree / f"{DEFAULT_PROFILE}.yaml").is_file():
        return tree
    # importlib.resources gives a MultiplexedPath for this data-only package: use the file.
    return Path(__file__).resolve().parents[1] / "builtin_profiles"


def list_profiles() -> list[tuple[str, str]]:
    """Built-in profiles as (name, description), sorted by name."""
    out = []
    for p in sorted(_builtin_dir().glob("*.yaml")):
        try:
            raw = yaml.safe_load(p.read_text()) or {}
            desc = str(raw.get("description", "")) if isinstance(raw, dict) else ""
        except yaml.YAMLError:
            desc = "(unreadable)"
        out.append((p.stem, desc))
    return out


def _not_regular(p: Path) -> str | None:
    """What ``p`` is when it exists but is not a regular file (directory, FIFO, device)."""
    try:
        mode = p.stat().st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _resolve(name_or_path: str, base_dir: Path | None = None) -> Path:
    p = Path(name_or_path)
    if base_dir is not None and not p.is_absolute():
        rel = base_dir / p
        if rel.is_file():
            return rel
    if p.is_file():
        return p
    builtin = _builtin_dir() / f"{name_or_path}.yaml"
    if "/" not in name_or_path and builtin.is_file():
        return builtin
    what = _not_regular(p)
    if what is not None:
        raise ProfileError([f"{name_or_path}: is {what}, not a profile file"])
    names = [n for n, _ in list_profiles()]
    close = difflib.get_close_matches(name_or_path, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ProfileError(
        [
            f"{name_or_path}: no such profile file or built-in profile{hint} "
            f"(built-ins: {', '.join(names)})"
        ]
    )


def _read_raw(path: Path, origins: Origins | None = None) -> dict[str, Any]:
    label = str(path)
    what = _not_regular(path)
    if what is not None:
        raise ProfileError([f"{label}: is {what}, not a profile file"])
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PROFILE_BYTES + 1)
    except OSError as e:
        raise ProfileError([f"{label}: cannot read ({e.strerror})"]) from None
    try:
        raw, lines = read_yaml_text(decode(data))
    except ProfileTextError as e:
        raise ProfileError([f"{label}: {e}"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ProfileError([f"{label}:{where}: YAML syntax error: {what}"]) from None
    if raw is None:
        raise ProfileError([f"{label}: empty file (a profile is a YAML mapping with classes:)"])
    if not isinstance(raw, dict):
        raise ProfileError(
            [f"{label}: top level is a {type(raw).__name__}, expected a mapping of profile fields"]
        )
    if origins is not None:
        origins.update({k: f"{label}:{n}" for k, n in lines.items()})
    return raw


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Merge ``over`` into a copy of ``base``: mappings merge, everything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_raw(
    path: Path, seen: tuple[Path, ...] = (), origins: Origins | None = None
) -> dict[str, Any]:
    rp = path.resolve()
    if rp in seen:
        chain = " -> ".join(str(s) for s in (*seen, rp))
        raise ProfileError([f"{path}: extends: cycle ({chain})"])
    if len(seen) >= MAX_EXTENDS_DEPTH:
        raise ProfileError([f"{path}: extends: chain longer than {MAX_EXTENDS_DEPTH} files"])
    own: Origins = {}
    raw = _migrate(_read_raw(path, own), str(path))
    parent = raw.get("extends")
    if parent is None:
        if origins is not None:
            origins.update(own)
        return raw
    if not isinstance(parent, str):
        raise ProfileError([f"{path}: extends: must be a built-in name or a file path"])
    try:
        base = _load_raw(_resolve(parent, path.parent), (*seen, rp), origins)
    except ProfileError as e:
        raise ProfileError([f"{path}: extends: {p}" for p in e.problems]) from None
    if origins is not None:
        origins.update(own)  # this file's lines win over its parent's
    merged = deep_merge(base, raw)
    merged["extends"] = parent
    return merged


def _migrate(raw: dict[str, Any], label: str) -> dict[str, Any]:
    v = raw.get("schema_version", SCHEMA_VERSION)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProfileError(
            [f"{label}: schema_version: must be an integer (current: {SCHEMA_VERSION})"]
        )
    if v > SCHEMA_VERSION:
        raise ProfileError(
            [
                f"{label}: schema_version: {v} is newer than this agentload understands "
                f"({SCHEMA_VERSION}); upgrade agentload"
            ]
        )
    while v < SCHEMA_VERSION:
        step = MIGRATIONS.get(v)
        if step is None:
            raise ProfileError(
                [
                    f"{label}: schema_version: {v} is no longer supported; migrate it to "
                    f"{SCHEMA_VERSION} (see README.md, 'Schema versions') and set "
                    f"schema_version: {SCHEMA_VERSION}"
                ]
            )
        raw = step(dict(raw))
        v += 1
        raw["schema_version"] = v
    return raw


def apply_overrides(
    raw: dict[str, Any], overrides: Iterable[str], origins: Origins | None = None
) -> dict[str, Any]:
    """Apply ``path.to.field=value`` overrides (value parsed as YAML) to a raw profile.

    An override may set any field the schema knows (unknown keys fail validation with a
    "did you mean"), but it never creates a traffic class or a tool that the profile does not
    define: ``classes.codingagent.weight=3`` with a class ``coding-agent`` is an error, not a
    new class. ``origins`` (optional) learns that the paths set came from this ``--set``.
    """
    out = copy.deepcopy(raw)
    problems = []
    for ov in overrides:
        path, eq, text = ov.partition("=")
        if not eq or not path.strip():
            problems.append(f"--set {ov}: expected path.to.field=value")
            continue
        try:
            value = read_yaml_text(text)[0] if text.strip() else ""
        except ProfileTextError as e:
            problems.append(f"--set {ov}: {e}")
            continue
        except yaml.YAMLError:
            value = text
        keys = path.strip().split(".")
        if any(not k for k in keys):
            problems.append(f"--set {ov}: {path.strip()}: empty key in the path")
            continue
        missing = _missing_entry(out, keys)
        if missing:
            problems.append(f"--set {ov}: {missing}")
            continue
        if origins is not None:
            origins[tuple(keys)] = f"--set {ov}"
        node: Any = out
        ok = True
        for i, k in enumerate(keys[:-1]):
            if isinstance(node, list):
                if not k.isdigit() or int(k) >= len(node):
                    problems.append(f"--set {ov}: {'.'.join(keys[: i + 1])}: no such list index")
                    ok = False
                    break
                node = node[int(k)]
            elif isinstance(node, dict):
                if not isinstance(node.get(k), (dict, list)):
                    node[k] = {}
                node = node[k]
            else:
                ok = False
                problems.append(f"--set {ov}: {'.'.join(keys[:i])} is not a mapping")
                break
        if not ok:
            continue
        last = keys[-1]
        if isinstance(node, list):
            if last.isdigit() and int(last) < len(node):
                node[int(last)] = value
            else:
                problems.append(f"--set {ov}: {path}: no such list index")
        else:
            node[last] = value
    if problems:
        raise ProfileError(problems)
    return out


_NAMED = ("classes", "tools")  # mappings whose entries a --set may change but not create


def _missing_entry(raw: dict[str, Any], keys: list[str]) -> str | None:
    """Why ``keys`` would create a class or tool the profile lacks (with a did-you-mean)."""
    if len(keys) < 2 or keys[0] not in _NAMED:
        return None
    have = raw.get(keys[0])
    names = [str(k) for k in have] if isinstance(have, dict) else []
    if keys[1] in names:
        return None
    what = "class" if keys[0] == "classes" else "tool"
    close = difflib.get_close_matches(keys[1], names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown {what} {keys[1]!r}{hint}; --set changes {keys[0]} the profile defines "
        f"({', '.join(names) or 'none'}), it does not create one: add it in a profile file"
    )


def load_profile(name_or_path: str = DEFAULT_PROFILE, overrides: Iterable[str] = ()) -> Profile:
    """Load, merge (extends), override (--set) and validate a profile; raises ProfileError.

    Each problem line names where the value came from: ``file:line`` for a YAML value,
    ``--set path=value`` for an override.
    """
    path = _resolve(name_or_path)
    origins: Origins = {}
    raw = _load_raw(path, origins=origins)
    raw = apply_overrides(raw, overrides, origins)
    if isinstance(raw, dict) and not raw.get("name"):
        raw["name"] = path.stem
    return validate_profile(raw, label=str(path), origins=origins)


def _where(label: str, path: tuple[str, ...], origins: Origins | None) -> str:
    """The origin of the value at ``path`` (its nearest recorded ancestor), else ``label``."""
    if origins:
        for n in range(len(path), 0, -1):
            hit = origins.get(path[:n])
            if hit is not None:
                return hit
    return label


def validate_profile(raw: Any, label: str = "<profile>", origins: Origins | None = None) -> Profile:
    """Validate a raw mapping into a Profile; raises ProfileError with every problem.

    ``origins`` maps key paths to ``file:line`` / ``--set ...`` so each line says where the
    bad value came from; without it every line starts with ``label``.
    """
    if not isinstance(raw, dict):
        raise ProfileError([f"{label}: expected a mapping of profile fields"])
    raw = _migrate(raw, label)
    try:
        prof = Profile.model_validate(raw)
    except ValidationError as e:
        raise ProfileError(
            [f"{_where(label, path, origins)}: {line}" for path, line in located_errors(e)]
        ) from None
    except RecursionError:
        raise ProfileError([f"{label}: nested too deeply"]) from None
    problems = prof.check()
    if problems:
        raise ProfileError(
            [
                f"{_where(label, tuple(p.split(':', 1)[0].split('.')), origins)}: {p}"
                for p in problems
            ]
        )
    return prof


def profile_schema() -> dict[str, Any]:
    """JSON Schema of the profile format (printed by `agentload profiles schema`)."""
    return Profile.model_json_schema()
