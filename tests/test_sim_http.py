"""The simulator over real loopback HTTP: wire shapes, errors, /metrics, faults, openai SDK."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workload.sim.__main__ import main as sim_main
from workload.sim.inprocess import SimThread
from workload.sim.launcher import SimProcess

MODEL = "agentload/sim-8b"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "parameters": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
        },
    },
]


@pytest.fixture(scope="module")
def sim():
    with SimThread("fast", seed=1) as s:
        yield s


def request(url: str, method: str, path: str, body=None, headers=None, raw: bytes | None = None):
    """One exchange; returns (status, headers, body bytes)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    return out


def sse_events(payload: bytes) -> list[bytes]:
    assert payload.endswith(b"\n\n")
    events = payload.split(b"\n\n")[:-1]
    for ev in events:
        assert ev.startswith(b"data: ")
    return [ev[len(b"data: ") :] for ev in events]


def chat_body(**kw) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Summarise the repo."}]}
    body.update(kw)
    return body


# -- streaming shapes -----------------------------------------------------------------------------
def test_chat_stream_framing_role_content_finish_usage_done(sim):
    body = chat_body(
        stream=True, stream_options={"include_usage": True}, max_tokens=20, ignore_eos=True
    )
    status, headers, payload = request(
        sim.url, "POST", "/v1/chat/completions", body, {"X-Request-Id": "abc-1"}
    )
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(payload)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(
        c["id"] == "chatcmpl-abc-1" and c["object"] == "chat.completion.chunk" for c in chunks
    )
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    content = chunks[1:-1]
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    usage = usage_chunk["usage"]
    assert usage["completion_tokens"] == 20
    assert usage["total_tokens"] == usage["prompt_tokens"] + 20
    assert "cached_tokens" in usage["prompt_tokens_details"]
    assert len(text.split()) == 20  # one word per token
    spec = usage_chunk["metrics"]["speculative_decoding"]
    assert set(spec) == {
        "mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
        "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens",
    }  # fmt: skip
    assert len(spec["acceptance_histogram"]) == spec["num_spec_tokens"] + 1
    # several tokens per chunk when drafts are accepted
    assert len(content) == 1 + spec["num_spec_steps"]
    for key in ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second"):  # fmt: skip
        assert key in usage_chunk["metrics"]


def test_stream_without_include_usage_has_no_usage_chunk(sim):
    _, _, payload = request(
        sim.url, "POST", "/v1/chat/completions", chat_body(stream=True, max_tokens=5)
    )
    chunks = [json.loads(e) for e in sse_events(payload)[:-1]]
    assert all(c["choices"] for c in chunks) and all("usage" not in c for c in chunks)


def test_completions_stream_has_no_role_chunk(sim):
    body = {"model": MODEL, "prompt": "def f():", "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    _, _, payload = request(sim.url, "POST", "/v1/completions", body)
    events = sse_events(payload)
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["object"] == "text_completion" and chunks[0]["id"].startswith("cmpl-")
    assert "text" in chunks[0]["choices"][0]
    assert chunks[-1]["usage"]["completion_tokens"] == 8


def test_non_stream_chat_body_prompt_tokens_match_tokenize_and_cache_hits(sim):
    messages = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "List the files."},
    ]
    status, _, raw = request(sim.url, "POST", "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 4})  # fmt: skip
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion" and body["system_fingerprint"]
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    _, _, tok = request(sim.url, "POST", "/tokenize", {"model": MODEL, "messages": messages})
    tok = json.loads(tok)
    assert tok["count"] == body["usage"]["prompt_tokens"] == len(tok["tokens"])
    assert tok["max_model_len"] == 32768
    _, _, raw2 = request(sim.url, "POST", "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_tokens": 4})  # fmt: skip
    cached = json.loads(raw2)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0


def test_tokenize_detokenize_roundtrip(sim):
    _, _, raw = request(sim.url, "POST", "/tokenize", {"model": MODEL, "prompt": "hello world"})
    toks = json.loads(raw)["tokens"]
    _, _, raw = request(sim.url, "POST", "/detokenize", {"model": MODEL, "tokens": toks})
    assert json.loads(raw) == {"prompt": "hello world"}


# -- tool calls ------------------------------------------------------------------------------------
def stream_tool_call(url: str, tool_choice) -> tuple[list[dict], str | None]:
    body = chat_body(tools=TOOLS, tool_choice=tool_choice, stream=True, stream_options={"include_usage": True})  # fmt: skip
    _, _, payload = request(url, "POST", "/v1/chat/completions", body)
    chunks = [json.loads(e) for e in sse_events(payload)[:-1]]
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    return deltas, deltas[-1]["finish_reason"]


def test_tool_call_streams_header_then_argument_fragments(sim):
    deltas, finish = stream_tool_call(sim.url, "required")
    calls = [d["delta"]["tool_calls"][0] for d in deltas if "tool_calls" in d["delta"]]
    head = calls[0]
    assert (
        head["index"] == 0
        and head["type"] == "function"
        and head["id"].startswith("chatcmpl-tool-")
    )
    assert head["function"]["name"] in ("read_file", "run_tests")
    assert all(
        set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in calls[1:]
    )
    args = json.loads("".join(c["function"]["arguments"] for c in calls[1:]))
    assert isinstance(args, dict)
    assert finish == "tool_calls"


def test_named_tool_choice_and_none(sim):
    deltas, _ = stream_tool_call(sim.url, {"type": "function", "function": {"name": "run_tests"}})
    calls = [d["delta"]["tool_calls"][0] for d in deltas if "tool_calls" in d["delta"]]
    assert calls[0]["function"]["name"] == "run_tests"
    deltas, finish = stream_tool_call(sim.url, "none")
    assert not any("tool_calls" in d["delta"] for d in deltas) and finish in ("stop", "length")


def test_malformed_tool_arguments_rate():
    with SimThread("fast", sets=["malformed_tool_rate=1.0"]) as s:
        body = chat_body(tools=TOOLS, tool_choice="required")
        _, _, raw = request(s.url, "POST", "/v1/chat/completions", body)
        call = json.loads(raw)["choices"][0]["message"]["tool_calls"][0]
        with pytest.raises(json.JSONDecodeError):
            json.loads(call["function"]["arguments"])


def _answer(url: str, body: dict) -> tuple:
    _, _, raw = request(url, "POST", "/v1/chat/completions", body)
    reply = json.loads(raw)
    msg = reply["choices"][0]["message"]
    return (
        msg.get("content"),
        json.dumps(msg.get("tool_calls")),
        reply["usage"]["completion_tokens"],
    )


def test_greedy_or_seeded_requests_get_the_same_answer_on_any_instance():
    # vLLM at temperature 0 (agentload's default) or with a request seed answers the same
    # conversation the same way on every instance, whatever arrived before it; so under
    # `history: actual` both sides of a canary follow the same session path.
    probe = chat_body(tools=TOOLS, max_tokens=64, temperature=0)
    seeded = chat_body(tools=TOOLS, max_tokens=64, temperature=1.0, seed=7)
    warm = chat_body(messages=[{"role": "user", "content": "Something else first."}])
    with SimThread("fast", seed=1) as a, SimThread("fast", seed=1) as b:
        for _ in range(3):
            _answer(b.url, warm)  # b has served other requests first
        assert _answer(a.url, probe) == _answer(b.url, probe) == _answer(b.url, probe)
        assert _answer(a.url, seeded) == _answer(b.url, seeded)
        other = chat_body(messages=[{"role": "user", "content": "Summarise the tests."}])
        answers = {_answer(a.url, {**other, "temperature": 0, "max_tokens": 64})}
        answers |= {_answer(a.url, {**probe, "max_tokens": 63})}
        assert _answer(a.url, probe) not in answers  # the answer follows the request


def test_sampled_requests_draw_in_arrival_order():
    # At a temperature without a seed the same request gets a fresh draw each time.
    body = chat_body(max_tokens=200, temperature=0.8)
    with SimThread("fast", seed=1) as s:
        answers = {_answer(s.url, body) for _ in range(4)}
    assert len(answers) > 1


# -- errors ----------------------------------------------------------------------------------------
def assert_error(status: int, raw: bytes, want: int, err_type: str) -> dict:
    assert status == want
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == err_type and err["code"] == want
    return err


def test_error_shapes(sim):
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", raw=b"{not json")
    err = assert_error(st, raw, 400, "Bad Request")  # vLLM: pydantic's json_invalid
    assert err["param"] == "body.1" and "json_invalid" in err["message"]
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", chat_body(model="nope"))
    err = assert_error(st, raw, 404, "NotFoundError")
    assert err["message"] == "The model `nope` does not exist."
    long = chat_body(messages=[{"role": "user", "content": "word " * 40_000}])
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", long)
    assert "maximum context length" in assert_error(st, raw, 400, "BadRequestError")["message"]
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", chat_body(max_tokens=40_000))
    assert_error(st, raw, 400, "BadRequestError")
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", chat_body(temperature=-1))
    assert_error(st, raw, 400, "BadRequestError")
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", chat_body(max_tokens="ten"))
    assert_error(st, raw, 400, "BadRequestError")
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", chat_body(messages=[]))
    assert_error(st, raw, 400, "BadRequestError")
    st, _, _ = request(sim.url, "GET", "/v1/nothing")
    assert st == 404
    st, _, _ = request(sim.url, "GET", "/server_info")
    assert st == 404  # dev mode is off in this preset


def test_priority_needs_priority_scheduling():
    with SimThread("vllm-0.28-v1", sets=["scheduling_policy=fcfs"]) as s:
        st, _, raw = request(
            s.url, "POST", "/v1/chat/completions", chat_body(priority=3, max_tokens=2)
        )
        assert_error(st, raw, 400, "BadRequestError")


def test_queue_limit_answers_503():
    with SimThread("fast", sets=["max_waiting=0"]) as s:
        st, _, raw = request(s.url, "POST", "/v1/chat/completions", chat_body(max_tokens=2))
        assert_error(st, raw, 503, "ServiceUnavailableError")


# -- identity and /metrics -------------------------------------------------------------------------
def parse_metrics(url: str) -> dict:
    _, _, raw = request(url, "GET", "/metrics")
    samples = {}
    for fam in text_string_to_metric_families(raw.decode()):
        for s in fam.samples:
            key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("engine", "model_name"))))  # fmt: skip
            samples[key] = s.value
    return samples


def test_metrics_parse_and_spec_counters_equal_request_sums():
    with SimThread("fast", seed=4) as s:
        totals = {"steps": 0, "drafts": 0, "accepted": 0}
        hist = [0, 0, 0, 0]
        for i in range(12):
            body = chat_body(max_tokens=10 + 7 * i, ignore_eos=True)
            _, _, raw = request(s.url, "POST", "/v1/chat/completions", body)
            spec = json.loads(raw)["metrics"]["speculative_decoding"]
            totals["steps"] += spec["num_spec_steps"]
            totals["drafts"] += spec["num_draft_tokens"]
            totals["accepted"] += spec["num_accepted_draft_tokens"]
            hist = [a + b for a, b in zip(hist, spec["acceptance_histogram"], strict=True)]
        m = parse_metrics(s.url)
        assert m[("vllm:spec_decode_num_drafts_total", ())] == totals["steps"]
        assert m[("vllm:spec_decode_num_draft_tokens_total", ())] == totals["drafts"]
        assert m[("vllm:spec_decode_num_accepted_tokens_total", ())] == totals["accepted"]
        for pos in range(3):
            key = ("vllm:spec_decode_num_accepted_tokens_per_pos_total", (("position", str(pos)),))
            assert m[key] == sum(hist[pos + 1 :])
        assert m[("vllm:request_success_total", (("finished_reason", "length"),))] == 12
        assert m[("vllm:time_to_first_token_seconds_count", ())] == 12
        assert m[("vllm:num_requests_running", ())] == 0
        names = {name for name, _ in m}
        for name in (
            "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total", "vllm:cache_config_info",
            "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
            "vllm:request_queue_time_seconds_count",
        ):  # fmt: skip
            assert name in names, name
        info = [labels for name, labels in m if name == "vllm:cache_config_info"][0]
        assert ("num_gpu_blocks", "16384") in info and ("block_size", "16") in info


def test_presets_differ_in_version_models_and_kv_sizing():
    seen = {}
    for preset in ("vllm-0.28-v1", "vllm-0.29-v2"):
        with SimThread(preset) as s:
            _, _, v = request(s.url, "GET", "/version")
            _, _, models = request(s.url, "GET", "/v1/models")
            card = json.loads(models)["data"][0]
            assert card["owned_by"] == "vllm" and card["max_model_len"] == 32768 and card["root"]
            m = parse_metrics(s.url)
            info = dict([labels for name, labels in m if name == "vllm:cache_config_info"][0])
            st, _, si = request(s.url, "GET", "/server_info")
            seen[preset] = (json.loads(v)["version"], info["num_gpu_blocks"], st)
            if st == 200:
                assert json.loads(si)["vllm_env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert seen["vllm-0.28-v1"][0] == "0.28.0" and seen["vllm-0.29-v2"][0] == "0.29.0"
    assert seen["vllm-0.28-v1"][1] != seen["vllm-0.29-v2"][1]
    assert seen["vllm-0.28-v1"][2] == 404 and seen["vllm-0.29-v2"][2] == 200


def test_version_presets_claim_no_undocumented_fallback():
    # nobody documented a structured-output fallback of vLLM 0.29: the preset keeps drafts
    with SimThread("vllm-0.29-v2", sets=["step_overhead_ms=0", "decode_ms_base=0"]) as s:
        body = chat_body(tools=TOOLS, tool_choice="required", max_tokens=30, ignore_eos=True)
        _, _, raw = request(s.url, "POST", "/v1/chat/completions", body)
        assert json.loads(raw)["metrics"]["speculative_decoding"]["num_spec_steps"] > 0


def test_spec_off_for_structured_scenario_drops_drafts_for_structured_outputs():
    sets = ["step_overhead_ms=0", "decode_ms_base=0", "spec_fallback_structured=true"]
    with SimThread("vllm-0.29-v2", sets=sets) as s:
        body = chat_body(tools=TOOLS, tool_choice="required")
        _, _, raw = request(s.url, "POST", "/v1/chat/completions", body)
        assert json.loads(raw)["metrics"]["speculative_decoding"]["num_spec_steps"] == 0
        _, _, raw = request(
            s.url, "POST", "/v1/chat/completions", chat_body(max_tokens=30, ignore_eos=True)
        )
        assert json.loads(raw)["metrics"]["speculative_decoding"]["num_spec_steps"] > 0


# -- faults ----------------------------------------------------------------------------------------
def test_fault_http_status():
    with SimThread("fast", faults=["429=1.0"]) as s:
        st, _, raw = request(s.url, "POST", "/v1/chat/completions", chat_body())
        assert_error(st, raw, 429, "TooManyRequestsError")


def test_fault_reset_mid_stream():
    with SimThread("fast", faults=["reset=1.0"]) as s:
        body = chat_body(stream=True, max_tokens=60, ignore_eos=True)
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            request(s.url, "POST", "/v1/chat/completions", body)
        m = parse_metrics(s.url)
        assert m[("vllm:request_success_total", (("finished_reason", "abort"),))] == 1


def test_fault_malformed_chunk():
    with SimThread("fast", faults=["malformed=1.0"]) as s:
        body = chat_body(stream=True, max_tokens=40, ignore_eos=True)
        _, _, payload = request(s.url, "POST", "/v1/chat/completions", body)
        bad = 0
        for ev in payload.split(b"\n\n"):
            if ev.startswith(b"data: {"):
                try:
                    json.loads(ev[6:])
                except json.JSONDecodeError:
                    bad += 1
        assert bad == 1 and payload.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("fault", ["stall=1.0", "slow=1.0"])
def test_fault_stall_and_slow_still_complete(fault):
    sets = ["fault_stall_s=0.05", "fault_drip_ms=1"]
    with SimThread("fast", faults=[fault], sets=sets) as s:
        body = chat_body(stream=True, max_tokens=12, ignore_eos=True)
        _, _, payload = request(s.url, "POST", "/v1/chat/completions", body)
        assert payload.endswith(b"data: [DONE]\n\n")


# -- connections -----------------------------------------------------------------------------------
def test_keep_alive_serves_several_requests_on_one_connection(sim):
    u = urllib.parse.urlparse(sim.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    for _ in range(3):
        conn.request("POST", "/v1/chat/completions", json.dumps(chat_body(max_tokens=3)), {"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] <= 3
    conn.close()


def test_client_disconnect_aborts_in_engine():
    with SimThread("default", sets=["decode_ms_base=20"]) as s:
        u = urllib.parse.urlparse(s.url)
        sock = socket.create_connection((u.hostname, u.port), timeout=10)
        body = json.dumps(chat_body(stream=True, max_tokens=2000, ignore_eos=True)).encode()
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.close()
        for _ in range(200):  # bounded wait for the server to notice
            if s.call(lambda: s.server.engine.stats.success["abort"]) == 1:
                break
            time.sleep(0.02)
        assert s.call(lambda: s.server.engine.stats.success["abort"]) == 1
        assert s.call(lambda: s.server.engine.kv.usage) == 0.0


# -- openai SDK ------------------------------------------------------------------------------------
def test_openai_sdk_stream_non_stream_and_tools(sim):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="sim", max_retries=0, timeout=30)
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5)  # fmt: skip
    assert resp.choices[0].message.content and resp.usage.completion_tokens <= 5
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 8
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    tool_resp = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "read it"}],
        tools=TOOLS,
        tool_choice="required",
    )
    call = tool_resp.choices[0].message.tool_calls[0]
    assert tool_resp.choices[0].finish_reason == "tool_calls"
    assert isinstance(json.loads(call.function.arguments), dict)
    comp = client.completions.create(model=MODEL, prompt="x = ", max_tokens=4)
    assert comp.choices[0].text
    assert [m.id for m in client.models.list().data] == [MODEL]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])


def test_openai_sdk_streams_tool_calls(sim):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=sim.url + "/v1", api_key="sim", max_retries=0, timeout=30)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        tool_choice="required",
        stream=True,
    )
    args, name, finish = "", None, None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                name = name or tc.function.name
                args += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    assert name in ("read_file", "run_tests") and finish == "tool_calls"
    assert isinstance(json.loads(args), dict)


# -- entry points ----------------------------------------------------------------------------------
def test_main_bad_args_exit_2(capsys):
    assert sim_main(["--preset", "nope"]) == 2
    assert sim_main(["--fault", "explode=0.1"]) == 2
    assert sim_main(["--set", "no_such_key=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("agentload: error:") for line in err)


def test_sim_process_starts_serves_and_stops():
    with SimProcess("fast", seed=3, faults=(), sets=("output_len_mean=8",)) as sim:
        assert sim.url.startswith("http://127.0.0.1:")
        st, _, raw = request(sim.url, "GET", "/version")
        assert st == 200 and json.loads(raw)["version"] == "0.33.0"
        proc = sim.proc
    assert proc is not None and proc.poll() is not None


def test_module_entry_prints_ready_line():
    proc = subprocess.Popen(
        [sys.executable, "-m", "workload.sim", "--port", "0", "--preset", "fast"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("agentload-sim listening on http://127.0.0.1:")
    finally:
        proc.terminate()
        # a stop right after the ready line is a clean one: its handler was already set
        # before the line (before, a SIGTERM sent at once was once lost: the simulator ran
        # on past the test, its listening socket open, until a second SIGTERM 46 min later)
        try:
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()  # never leave it running
                proc.wait()
        assert code == 0


# -- fidelity with the captured vLLM 0.32 replies --------------------------------------------------
VLLM_REAL = Path(__file__).parent / "fixtures" / "vllm_real"
# exchange of tests/vllm/test_fidelity_real.py -> the captured reply of the same kind
CAPTURED = {
    "models": "models.json",
    "version": "version.json",
    "chat_stream": "chat_stream.sse",
    "chat_stream_no_usage": "chat_stream_no_usage.sse",
    "chat_nonstream": "chat_nonstream.json",
    "chat_stream_tool_named": "chat_stream_tool_call.sse",
    "completions_stream": "completions_stream.sse",
    "completions_nonstream": "completions_nonstream.json",
    "tokenize_prompt": "tokenize_prompt.json",
    "tokenize_messages": "tokenize_messages.json",
    "error_unknown_model": "error_unknown_model.json",
    "error_invalid_json": "error_invalid_json.json",
    "error_prompt_too_long": "error_prompt_too_long.json",
    "error_max_tokens_too_large": "error_max_tokens_too_large.json",
}


def test_reply_shapes_match_captured_vllm():
    """The real-server fidelity test, against the captures: no shape difference at all."""
    from tests.vllm.test_fidelity_real import KNOWN_SIM_DIFFS, exchanges
    from tests.vllm.wire_shape import diff, shape, stream_diff

    sets = ["model=agentload-tiny", "max_model_len=8192", "block_size=128"]
    seen = set()
    with SimThread("default", seed=3, sets=sets) as s:
        for name, (method, path, body) in exchanges("agentload-tiny", 8192).items():
            raw_body = body if isinstance(body, bytes) else None
            _, _, got = request(s.url, method, path, None if raw_body else body, raw=raw_body)
            real = (VLLM_REAL / CAPTURED[name]).read_bytes()
            if CAPTURED[name].endswith(".sse"):
                lines = stream_diff(real, got)
            else:
                lines = diff(shape(json.loads(real)), shape(json.loads(got)))
            seen |= {f"{name} {ln}" for ln in lines}
    assert not seen - KNOWN_SIM_DIFFS, sorted(seen - KNOWN_SIM_DIFFS)


def test_fingerprint_only_on_the_last_chunk_in_vllm_format(sim):
    fp = re.compile(r"vllm-\d+\.\d+\.\d+-[0-9a-f]{8}")
    for opts in ({"stream_options": {"include_usage": True}}, {}):
        body = chat_body(stream=True, max_tokens=6, ignore_eos=True, **opts)
        _, _, payload = request(sim.url, "POST", "/v1/chat/completions", body)
        chunks = [json.loads(e) for e in sse_events(payload)[:-1]]
        assert all("system_fingerprint" not in c for c in chunks[:-1])
        last = chunks[-1]
        assert fp.fullmatch(last["system_fingerprint"])
        assert ("usage" in last) == bool(opts) and (last["choices"] == []) == bool(opts)
    _, _, raw = request(sim.url, "POST", "/v1/chat/completions", chat_body(max_tokens=2))
    body = json.loads(raw)
    assert fp.fullmatch(body["system_fingerprint"])
    msg = body["choices"][0]["message"]
    assert "tool_calls" not in msg and msg["reasoning"] is None and "reasoning_content" not in msg


def test_created_cache_tokens_are_the_new_full_prompt_blocks():
    messages = [{"role": "user", "content": "the agent reads the file. " * 60}]
    with SimThread("fast", seed=2) as s:
        first, second = (
            json.loads(
                request(
                    s.url, "POST", "/v1/chat/completions",
                    {"model": MODEL, "messages": messages, "max_tokens": 2},
                )[2]
            )["usage"]
            for _ in range(2)
        )  # fmt: skip
    d1, d2 = first["prompt_tokens_details"], second["prompt_tokens_details"]
    full = first["prompt_tokens"] // 16 * 16
    assert d1 == {"cached_tokens": 0, "created_cache_tokens": full, "multimodal_tokens": None}
    assert d2["cached_tokens"] + d2["created_cache_tokens"] == full and d2["cached_tokens"] > 0


def test_named_tool_call_finishes_with_stop_and_cut_calls_come_back_as_text(sim):
    named = {"type": "function", "function": {"name": "read_file"}}
    deltas, finish = stream_tool_call(sim.url, named)
    assert finish == "stop"  # vLLM: "tool_calls" only for auto / required
    assert all(d["delta"]["content"] is None for d in deltas if "tool_calls" in d["delta"])
    body = chat_body(tools=TOOLS, tool_choice=named, max_tokens=2)
    msg = json.loads(request(sim.url, "POST", "/v1/chat/completions", body)[2])["choices"][0]
    assert msg["finish_reason"] == "length" and "tool_calls" not in msg["message"]
    assert msg["message"]["content"].startswith('<tool_call>\n{"name": "read_file", "arguments": ')


def test_cache_config_info_has_vllm_labels(sim):
    m = parse_metrics(sim.url)
    info = dict([labels for name, labels in m if name == "vllm:cache_config_info"][0])
    assert info["kv_cache_size_tokens"] == str(16384 * 16)
    assert info["kv_cache_memory_bytes"] == str(16384 * 16 * 131072)
    assert info["kv_cache_max_concurrency"] == str(16384 * 16 / 32768)
    assert "swap_space" not in info
    _, headers, _ = request(sim.url, "GET", "/metrics")
    assert headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"


# -- reasoning (a --reasoning-parser) -------------------------------------------------------------
@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_thinking_budget_streams_reasoning_first_then_the_answer(field):
    with SimThread("fast", sets=[f"reasoning_field={field}"]) as s:
        body = chat_body(
            stream=True, max_tokens=30, ignore_eos=True, thinking_token_budget=12,
            stream_options={"include_usage": True},
        )  # fmt: skip
        st, _, raw = request(s.url, "POST", "/v1/chat/completions", body)
        assert st == 200
        chunks = [json.loads(e) for e in sse_events(raw) if e != b"[DONE]"]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]][1:]  # after the role
        kinds = ["r" if d.get(field) else "c" for d in deltas if d.get(field) or d.get("content")]
        first_c = kinds.index("c")
        assert set(kinds[:first_c]) == {"r"} and set(kinds[first_c:]) == {"c"}
        usage = chunks[-1]["usage"]
        assert usage["completion_tokens"] == 30
        assert usage["completion_tokens_details"] == {"reasoning_tokens": 12}
        # non-streamed: the reasoning in the message, the answer in content
        st, _, raw = request(
            s.url, "POST", "/v1/chat/completions",
            chat_body(max_tokens=30, ignore_eos=True, thinking_token_budget=12),
        )  # fmt: skip
        msg = json.loads(raw)["choices"][0]["message"]
        assert len(msg[field].split()) == 12 and len(msg["content"].split()) == 18


def test_without_a_reasoning_parser_the_budget_is_ignored(sim):
    body = chat_body(max_tokens=10, ignore_eos=True, thinking_token_budget=5)
    st, _, raw = request(sim.url, "POST", "/v1/chat/completions", body)
    out = json.loads(raw)
    assert st == 200 and out["choices"][0]["message"]["reasoning"] is None
    assert out["usage"]["completion_tokens_details"] is None


def test_the_simulator_runs_on_asyncios_loop_unless_asked():
    # its timing figures and calibrations were measured there; uvloop (installed with
    # agentload for `record`) only when AGENTLOAD_SIM_LOOP=uvloop
    import asyncio

    from workload.errors import UsageError
    from workload.sim.__main__ import _runner

    assert _runner("asyncio") is asyncio.run
    uvloop = pytest.importorskip("uvloop")
    assert _runner("uvloop") is uvloop.run
    with pytest.raises(UsageError, match="AGENTLOAD_SIM_LOOP=trio is not an event loop"):
        _runner("trio")
