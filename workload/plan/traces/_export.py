"""Export a run as a Mooncake-style trace (timestamps, sizes, block hash ids).

requests.jsonl holds no prompt text (only a blake2b ``body_hash``), so the
prompts are re-planned: with scripted history a session's bodies depend only
on (profile, seed, model, max_model_len, class, user, session, step), all in
run.json and the session id. Each re-planned body is checked against the
recorded ``body_hash``; a row that does not match is skipped and reported.
Runs with ``history: actual`` (assistant turns came from the server and are
not recorded) or ``--tokenizer server`` cannot be re-planned offline.

Token stream of a chat body: the first system message, the tool schemas,
then every other message (role, content, tool calls), each encoded on its
own, so equal message prefixes give equal token prefixes. A completions
body is its prompt encoded. Blocks of 512 tokens get a chained blake2b hash
(the hash of a block covers every block before it), numbered 0, 1, 2, ... in
order of first appearance, as Mooncake numbers them.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from workload.errors import TokenizerUnavailable, TraceError
from workload.measure.artifacts import read_json
from workload.measure.records import RequestRecord
from workload.plan.loading import ProfileError, validate_profile
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import Tokenizer, get_tokenizer
from workload.plan.traces._read import BLOCK_TOKENS

_SESSION_ID = re.compile(r"^(?P<cls>.+)-u(?P<u>\d+)-s(?P<s>\d+)-[0-9a-f]{8}$")


@dataclass
class ExportResult:
    rows: int = 0  # lines written
    verified: int = 0  # of those, re-planned body matched the recorded body_hash
    unverified: int = 0  # written without a body_hash to check against
    skipped: list[str] = field(default_factory=list)  # "file:line: reason"


class BlockHasher:
    """Chained block hashes -> small sequential ids (equal prefix blocks, equal ids)."""

    def __init__(self, block_tokens: int = BLOCK_TOKENS) -> None:
        self.block_tokens = block_tokens
        self._ids: dict[bytes, int] = {}

    def hash_ids(self, tokens: list[int]) -> list[int]:
        """One id per block of tokens (the last block may be short)."""
        arr = np.asarray(tokens, dtype=np.int64)
        prev = b""
        out = []
        for i in range(math.ceil(len(arr) / self.block_tokens)):
            blk = arr[i * self.block_tokens : (i + 1) * self.block_tokens]
            prev = hashlib.blake2b(prev + blk.tobytes(), digest_size=16).digest()
            out.append(self._ids.setdefault(prev, len(self._ids)))
        return out


class _Encoder:
    """Body -> token stream, with a memo: histories repeat message texts step after step."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tok = tokenizer
        self._memo: dict[str, list[int]] = {}

    def enc(self, text: str) -> list[int]:
        ids = self._memo.get(text)
        if ids is None:
            if len(self._memo) > 20000:
                self._memo.clear()
            ids = self._memo[text] = self.tok.encode(text)
        return ids

    def _message(self, m: dict[str, Any]) -> list[int]:
        out = self.enc(str(m.get("role", "")))
        c = m.get("content")
        if isinstance(c, str):
            out = out + self.enc(c)
        elif c is not None:
            out = out + self.enc(orjson.dumps(c).decode())
        for k in ("tool_calls", "tool_call_id"):
            if m.get(k):
                out = out + self.enc(orjson.dumps(m[k], option=orjson.OPT_SORT_KEYS).decode())
        return out

    def body_tokens(self, body: dict[str, Any]) -> list[int]:
        if "prompt" in body:
            return self.enc(str(body["prompt"]))
        msgs = list(body.get("messages") or [])
        out: list[int] = []
        if msgs and msgs[0].get("role") == "system":
            out += self._message(msgs.pop(0))
        if body.get("tools"):
            out += self.enc(orjson.dumps(body["tools"], option=orjson.OPT_SORT_KEYS).decode())
        for m in msgs:
            out += self._message(m)
        return out


def _rows(run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for p in sorted(run_dir.glob("requests*.jsonl")):
        with open(p, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        out.append((f"{p}:{n}", orjson.loads(line)))
                    except orjson.JSONDecodeError:
                        out.append((f"{p}:{n}", {}))
    return out


def export_run(
    run_dir: str | Path, out_path: str | Path, *, tokenizer: Tokenizer | None = None
) -> ExportResult:
    """Write run_dir's requests as Mooncake JSONL (plus session_id) to out_path."""
    out, res = replan_run(run_dir, tokenizer=tokenizer)
    with open(out_path, "wb") as fh:
        for line in out:
            fh.write(orjson.dumps(line) + b"\n")
    res.rows = len(out)
    return res


def replan_run(
    run_dir: str | Path, *, tokenizer: Tokenizer | None = None
) -> tuple[list[dict[str, Any]], ExportResult]:
    """run_dir's requests re-planned as Mooncake rows (sorted by start, with session_id),
    and what was checked or skipped. Raises TraceError when the run cannot be re-planned."""
    run_dir = Path(run_dir)
    planner, tok = _replanner(run_dir, tokenizer)
    res = ExportResult()
    by_session: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for where, row in _rows(run_dir):
        if not row or "session_id" not in row:
            res.skipped.append(f"{where}: not a request record")
            continue
        by_session.setdefault(row["session_id"], []).append((where, row))
    bodies: list[tuple[float, str, bytes, dict[str, Any]]] = []
    for sid, rows in by_session.items():
        bodies += _replanned_bodies(planner, sid, rows, res)
    bodies.sort(key=lambda b: b[0])
    return _mooncake_rows(bodies, _Encoder(tok)), res


def _replanner(run_dir: Path, tokenizer: Tokenizer | None) -> tuple[SessionPlanner, Tokenizer]:
    """The run's session planner, re-made from run.json. Raises TraceError."""
    try:
        run = read_json(run_dir / "run.json")
    except (OSError, ValueError) as e:
        raise TraceError(f"{run_dir}: no readable run.json ({e})") from None
    try:
        profile = validate_profile(run.get("profile"), f"{run_dir}/run.json profile")
    except ProfileError as e:
        raise TraceError(str(e).splitlines()[0]) from None
    if profile.history != "scripted":
        raise TraceError(
            f"{run_dir}: history {profile.history!r}: the assistant turns came from the server and "
            "are not recorded, so the prompts cannot be rebuilt; export needs scripted history"
        )
    if run.get("tokenizer") == "server":
        raise TraceError(
            f"{run_dir}: the run sized prompts with the server's tokenizer; they cannot be rebuilt offline"
        )
    try:
        tok = tokenizer or get_tokenizer("tiktoken:cl100k_base")
        planner = SessionPlanner(
            profile,
            tok,
            model=run.get("model") or "",
            max_model_len=(run.get("target") or {}).get("max_model_len"),
            seed=run.get("seed"),
        )
    except (ProfileError, TokenizerUnavailable) as e:
        raise TraceError(f"{run_dir}: cannot re-plan the run ({str(e).splitlines()[0]})") from None
    return planner, tok


def _replanned_bodies(
    planner: SessionPlanner,
    sid: str,
    rows: list[tuple[str, dict[str, Any]]],
    res: ExportResult,
) -> list[tuple[float, str, bytes, dict[str, Any]]]:
    """One session's re-planned bodies, checked against the recorded body_hash; rows that do
    not follow the re-planned session are counted in `res.skipped`."""
    bodies: list[tuple[float, str, bytes, dict[str, Any]]] = []
    rows.sort(key=lambda wr: (wr[1].get("step", 0), wr[1].get("attempt", 0)))
    m = _SESSION_ID.match(sid)
    if not m or m["cls"] not in planner.classes:
        res.skipped += [f"{w}: session id {sid!r} is not one this profile plans" for w, _ in rows]
        return bodies
    sess = planner.new_session(m["cls"], int(m["u"]), int(m["s"]))
    for i, (_where, row) in enumerate(rows):
        step = sess.next_step()
        if step is None or (step.step, step.attempt) != (row.get("step"), row.get("attempt")):
            res.skipped += [
                f"{w}: step {r.get('step')} attempt {r.get('attempt')} does not follow the "
                "re-planned session"
                for w, r in rows[i:]
            ]
            break
        body = step.body
        want = row.get("body_hash")
        if want is not None and hashlib.blake2b(body, digest_size=8).hexdigest() != want:
            res.skipped += [
                f"{w}: re-planned body differs from the recorded body_hash" for w, _ in rows[i:]
            ]
            break
        if want is None:
            res.unverified += 1
        else:
            res.verified += 1
        bodies.append((float(row.get("t_start") or 0.0), sid, body, row))
        sess.observe(
            RequestRecord(status=row.get("status", "ok"), error_kind=row.get("error_kind"))
        )
    return bodies


def _mooncake_rows(
    bodies: list[tuple[float, str, bytes, dict[str, Any]]], enc: _Encoder
) -> list[dict[str, Any]]:
    """Mooncake rows of bodies sorted by start time: ms since the first, lengths, block hashes."""
    out: list[dict[str, Any]] = []
    hasher = BlockHasher()
    t0 = bodies[0][0] if bodies else 0.0
    for t, sid, body, row in bodies:
        d = orjson.loads(body)
        tokens = enc.body_tokens(d)
        outlen = row.get("completion_tokens")
        if outlen is None:
            outlen = d.get("max_tokens") or d.get("max_completion_tokens") or 0
        out.append(
            {
                "timestamp": int(round((t - t0) * 1000)),
                "input_length": len(tokens),
                "output_length": int(outlen),
                "hash_ids": hasher.hash_ids(tokens),
                "session_id": sid,
            }
        )
    return out
