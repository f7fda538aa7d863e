"""Before any traffic: the target answers, and the profile (or trace) fits what it serves.

Fail fast, with one line (UsageError), before Locust starts; `agentload run` and
`agentload capacity` call it once their target is known.
"""

from __future__ import annotations

import os
import time

from workload.errors import ProfileError, SetupError, TokenizerUnavailable, UsageError
from workload.observe.safe import redact_url, redact_urls_in
from workload.observe.target import probe_target
from workload.plan.sessions import SessionPlanner
from workload.plan.tokens import ServerTokenizer, get_tokenizer
from workload.run.replay import check_context, trace_note
from workload.run.spec import RunSpec

PROBE_TIMEOUT_S = 10.0  # the longest agentload waits for GET /v1/models before a run


def preflight(spec: RunSpec) -> None:
    """The target's /v1/models answers in time; the profile plans against its model."""
    # Bounded: a target slower to answer than the run is long cannot be measured by it.
    timeout_s = min(PROBE_TIMEOUT_S, max(spec.duration_s, 1.0))
    started = time.monotonic()
    try:
        facts = probe_target(
            spec.host, os.environ.get(spec.api_key_env) or None, spec.model or None, timeout_s
        )
    except SetupError as e:
        took = time.monotonic() - started
        if took >= timeout_s * 0.9:
            raise UsageError(
                f"{redact_url(spec.host)}/v1/models did not answer within {timeout_s:g}s "
                f"(the run is {spec.duration_s:g}s): is the target overloaded or --host wrong?"
            ) from None
        raise UsageError(str(e)) from None
    took = time.monotonic() - started
    if took > spec.duration_s:
        raise UsageError(
            f"{redact_url(spec.host)}/v1/models took {took:.1f}s, longer than the run "
            f"({spec.duration_s:g}s): use a longer --duration or check the target"
        )
    if spec.trace:
        _preflight_trace(spec, facts.get("max_model_len"))
    if spec.tokenizer == "server":
        _check_server_tokenizer(spec, facts["model"], timeout_s)
        return  # the planner is built with it inside the run
    try:
        SessionPlanner(
            spec.profile,
            get_tokenizer("tiktoken:cl100k_base"),
            model=facts["model"],
            max_model_len=facts.get("max_model_len"),
        )
    except ProfileError as e:
        raise UsageError("; ".join(e.problems)) from None


def _check_server_tokenizer(spec: RunSpec, model: str, timeout_s: float) -> None:
    """`--tokenizer server` needs the target's POST /tokenize: refused now, in one line, not
    left to the Locust process, whose users would wait for a planner that never comes."""
    api_key = os.environ.get(spec.api_key_env) or None
    tok = ServerTokenizer(spec.host, model, api_key, timeout=timeout_s)
    try:
        tok.count("agentload")
    except (TokenizerUnavailable, KeyError, TypeError, ValueError) as e:
        why = e if isinstance(e, TokenizerUnavailable) else f"an answer without tokens ({e!r})"
        raise UsageError(f"--tokenizer server: {redact_urls_in(str(why))}") from None


def _preflight_trace(spec: RunSpec, max_model_len: int | None) -> None:
    """Say what the replay sends; refuse (or clip, with --trace-clip) too-long requests."""
    print(trace_note(spec), flush=True)
    fit = check_context(spec, max_model_len)
    if fit.clipped:
        print(
            f"agentload: {fit.message('--trace ' + spec.trace)}; clipped (--trace-clip)", flush=True
        )
    elif max_model_len is None:
        print(
            "agentload: the server's max_model_len is unknown: trace lengths not checked",
            flush=True,
        )
