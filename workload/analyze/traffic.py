"""Whether two runs sent the same traffic, and how far it diverged where it may.

* `traffic_differences`: runs pair (same session ids mean the same requests) only when
  everything that shapes traffic matches: seed, profile name and content (history
  mode, classes, tools; not the `compare` thresholds or the run length), `--set`
  overrides and users.
* `history_divergence`: with `history: actual` the replies go into the history, so
  the two sides' traffic diverges by design; how far (steps per session, prompt
  tokens per step, tool calls per step) tells whether like was compared with like.
* `tool_loop_examples`: the first failing request per (class, step), to look up in
  the server log.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from typing import Any

import numpy as np

from workload.analyze.table import Pair, Rows

# The run length the verdict's quality was measured at (mixed, simulator:
# docs/canary-verdict-quality.md); shorter runs are judged but flagged.
VALIDATED_S = 60.0
VALIDATED_BLOCKS = 8  # the canary's default design: 8 blocks of the profile's run (60 s)


def _sets(argv: Any) -> list[str]:
    """The ``--set`` overrides of a run's command line: run.json keeps it as one string (the
    words joined by spaces, `workload/cli/main.py`), older or hand-made ones as a list."""
    if isinstance(argv, str):
        argv = argv.split()
    if not isinstance(argv, list):
        return []
    out = []
    for i, x in enumerate(argv):
        if x == "--set" and i + 1 < len(argv):
            out.append(str(argv[i + 1]))
        elif isinstance(x, str) and x.startswith("--set="):
            out.append(x.split("=", 1)[1])
    return sorted(out)


def traffic_key(run: dict[str, Any]) -> dict[str, Any]:
    """What shapes a run's traffic, from run.json."""
    raw = run.get("profile")
    prof: dict[str, Any] = raw if isinstance(raw, dict) else {}
    content = {k: v for k, v in prof.items() if k not in ("compare", "description", "run")}
    if isinstance(prof.get("run"), dict):
        content["run"] = {k: v for k, v in prof["run"].items() if k != "duration_s"}
    digest = hashlib.blake2b(
        json.dumps(content, sort_keys=True, default=str).encode(), digest_size=8
    ).hexdigest()
    return {
        "seed": run.get("seed", prof.get("seed")),
        "profile": run.get("profile_name", prof.get("name")),
        "history": prof.get("history", "scripted"),
        "set": _sets(run.get("argv")),
        "users": run.get("users"),
        "profile content": digest,
    }


def traffic_differences(run_a: dict[str, Any], run_b: dict[str, Any]) -> list[str]:
    """'field A=x B=y' for every traffic-shaping field that differs (empty: runs pair)."""
    if not run_a or not run_b:
        return []
    ka, kb = traffic_key(run_a), traffic_key(run_b)
    return [f"{k} A={ka[k]} B={kb[k]}" for k in ka if ka[k] != kb[k]]


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def history_divergence(pair: Pair) -> dict[str, dict[str, Any]]:
    """Per side: steps per session, prompt tokens per step, tool calls per step; and `pairs`:
    how many requests both sides served (`both`) and of those how many with the same content
    (`same_content`, None when a side recorded no content hashes): what the paired shifts use.
    """
    out: dict[str, dict[str, Any]] = {}
    for side, rq, ss in (("a", pair.req[0], pair.sess[0]), ("b", pair.req[1], pair.sess[1])):
        ok = rq.status == 0
        ptok = rq.ptok[ok]
        out[side] = {
            "steps_per_session": _mean(ss.steps_done.tolist()),
            "prompt_tokens_per_step": _mean(ptok[(ptok != 0) & ~np.isnan(ptok)].tolist()),
            "tool_calls_per_step": _mean(rq.ntool[ok].astype(float).tolist()),
        }
    sides = []
    for t in pair.req:
        r = Rows(t).where(t.status == 0)
        k, first = np.unique(r.key(), return_index=True)
        sides.append((k, r.col("content")[first]))
    _, ia, ib = np.intersect1d(sides[0][0], sides[1][0], assume_unique=True, return_indices=True)
    ca, cb = sides[0][1][ia], sides[1][1][ib]
    hashed = bool(len(ca)) and bool((ca != 0).any()) and bool((cb != 0).any())
    out["pairs"] = {
        "both": len(ia),
        "same_content": int(((ca == cb) & (ca != 0)).sum()) if hashed else None,
    }
    return out


def divergence_line(div: dict[str, dict[str, Any]]) -> str:
    """One sentence: how far the two sides' traffic diverged."""
    parts = []
    same = True
    for k, label in (
        ("steps_per_session", "steps/session"),
        ("prompt_tokens_per_step", "prompt tokens/step"),
        ("tool_calls_per_step", "tool calls/step"),
    ):
        va, vb = div["a"].get(k), div["b"].get(k)
        if va is None or vb is None:
            continue
        same = same and va == vb
        rel = f" ({100 * (vb / va - 1):+.0f} %)" if va else ""
        parts.append(f"{label} A {va:.3g} B {vb:.3g}{rel}")
    if not parts:
        return (
            "history: actual (replies go into the history): no rows to measure how far the "
            "sides' traffic diverged"
        )
    pairs = div.get("pairs") or {}
    both, matched = pairs.get("both"), pairs.get("same_content")
    tail = ""
    if both and matched is None:
        tail = (
            "; no content hashes recorded (an older agentload), so the paired shifts pair by "
            "(session, step) whatever each side sent"
        )
    elif both and matched is not None:  # (matched is None went above)
        same = same and matched == both
        tail = (
            f"; the paired shifts compare the {matched:,} of {both:,} requests both sides "
            f"served with the same content ({100 * matched / both:.0f} %)"
        )
    if same:
        # e.g. two servers that answer greedy requests the same way: the sessions never parted
        return (
            "history: actual, so the sides' traffic may diverge (replies go into the history); "
            "here it did not: " + "; ".join(parts) + tail
        )
    return (
        "history: actual, so the sides' traffic diverges by design (replies go into the "
        "history): " + "; ".join(parts) + tail
    )


def tool_loop_examples(reqs: list[dict[str, Any]], limit: int = 10) -> list[dict[str, Any]]:
    """The first failing request per (class, step): tool, what was wrong, request id."""
    seen: set[tuple[str, int]] = set()
    out: list[dict[str, Any]] = []
    bad = [r for r in reqs if r.get("tool_loop_failure") or r.get("error_kind") == "tool_loop"]
    for r in sorted(bad, key=lambda r: float(r.get("t_start") or 0)):
        key = (str(r.get("user_class") or ""), int(r.get("step") or 0))
        if key in seen:
            continue
        seen.add(key)
        calls = r.get("tool_calls") or []
        tool = next((c.get("name") for c in calls if isinstance(c, dict) and c.get("name")), None)
        out.append(
            {
                "class": key[0],
                "step": key[1],
                "tool": tool or "-",
                "what": r.get("tool_loop_failure") or r.get("error_detail") or r.get("error_kind"),
                "request_id": r.get("request_id"),
                "session_id": r.get("session_id"),
            }
        )
        if len(out) >= limit:
            break
    return out
