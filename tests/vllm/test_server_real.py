"""workload.observe (fingerprint, metrics) and workload.plan.tokens against the real vLLM: fingerprint, /metrics, /tokenize."""

from __future__ import annotations

import json

import pytest

from tests.vllm.conftest import scrape
from workload.measure.client import Client
from workload.measure.transport import PreparedRequest
from workload.observe.fingerprint import fingerprint
from workload.observe.metrics import COUNTERS, GAUGES, HISTOGRAMS, LABELLED, parse_metrics
from workload.plan.tokens import ServerTokenizer

pytestmark = pytest.mark.vllm


def _value(fp: dict, key: str):
    return fp[key]["value"], fp[key]["source"]


def test_fingerprint_filled_from_real_server(vllm_server) -> None:
    log = vllm_server.log_path.read_text(errors="replace") if vllm_server.log_path else None
    fp = fingerprint(vllm_server.base_url, server_log_text=log, labels={"ci": "vllm-cpu"})
    assert _value(fp, "server_version") == ("0.32.0", "/version")
    assert _value(fp, "model_id") == (vllm_server.model, "/v1/models")
    assert _value(fp, "max_model_len") == (vllm_server.max_model_len, "/v1/models")
    src = "/metrics cache_config_info"
    assert _value(fp, "kv_block_size") == (128, src)  # the CPU backend's block size
    assert fp["kv_num_gpu_blocks"]["source"] == src and fp["kv_num_gpu_blocks"]["value"] > 0
    assert fp["kv_capacity_tokens"]["value"] == 128 * fp["kv_num_gpu_blocks"]["value"]
    assert _value(fp, "prefix_caching") == ("True", src)
    assert (
        fp["_probes"]["/server_info"] == "HTTP 404"
    )  # no VLLM_SERVER_DEV_MODE: unknown, not invented
    assert fp["vllm_env"]["value"] == "unknown"
    assert fp["label.ci"]["value"] == "vllm-cpu"
    if log is not None:
        # vLLM-CPU has no Triton, so it says it falls back to the V1 model runner.
        assert _value(fp, "model_runner") == ("V1", "server log")
        assert any("V1 model runner" in w for w in fp["fallback_warnings"]["value"])
        assert _value(fp, "architecture") == ("Qwen2ForCausalLM", "server log")


def test_parse_metrics_sees_every_tracked_series(vllm_server) -> None:
    m = scrape(vllm_server)
    missing = [n for n in COUNTERS if n not in m["counters"]]
    missing += [n for n in GAUGES if n not in m["gauges"]]
    missing += [n for n in LABELLED if n not in m["labelled"]]
    missing += [n for n in HISTOGRAMS if n not in m["histograms"]]
    assert not missing, f"vLLM 0.32 /metrics lacks {missing}"
    assert m["engines"] == ["0"]
    (cc,) = m["cache_config"]
    assert cc["block_size"] == "128" and cc["enable_prefix_caching"] == "True"
    assert set(m["labelled"]["vllm:spec_decode_num_accepted_tokens_per_pos_total"]) == {
        "0",
        "1",
        "2",
    }


def test_server_tokenizer_counts_match_usage(vllm_server) -> None:
    tok = ServerTokenizer(vllm_server.base_url, vllm_server.model)
    text = "The agent reads the file, then runs the tests and reports."
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]
    comp = vllm_server.post_json(
        "/v1/completions", {"model": vllm_server.model, "prompt": text, "max_tokens": 1}
    )
    chat = vllm_server.post_json(
        "/v1/chat/completions", {"model": vllm_server.model, "messages": msgs, "max_tokens": 1}
    )
    assert tok.count(text) == comp["usage"]["prompt_tokens"]
    assert tok.count_messages(msgs) == chat["usage"]["prompt_tokens"]
    assert tok.decode(tok.encode(text)) == text


def test_planner_with_server_tokenizer_gives_exact_prompt_sizes(vllm_server) -> None:
    """`--tokenizer server` calibration: every planned segment is exactly its size on the server."""
    from workload.plan.loading import load_profile
    from workload.plan.sessions import SessionPlanner

    tok = ServerTokenizer(vllm_server.base_url, vllm_server.model)
    system_n, user_n = 300, 50
    profile = load_profile(
        "chat",
        [
            f"classes.chat.system_prompt.tokens={system_n}",
            f"classes.chat.user_turn={{dist: constant, value: {user_n}}}",
            "classes.chat.steps={dist: constant, value: 1}",
            "classes.chat.output.tokens={dist: constant, value: 4}",
        ],
    )
    planner = SessionPlanner(
        profile, tok, model=vllm_server.model, max_model_len=vllm_server.max_model_len, seed=7
    )
    # The chat template's own tokens for a system + user pair with empty contents.
    overhead = tok.count_messages(
        [{"role": "system", "content": ""}, {"role": "user", "content": ""}]
    )
    client = Client(vllm_server.base_url)
    try:
        for i in range(3):
            step = planner.new_session("chat", 0, i).next_step()
            assert step is not None
            body = json.loads(step.body)
            sizes = [tok.count(m["content"]) for m in body["messages"]]
            assert sizes == [system_n, user_n], sizes
            req = step.request
            req.request_id = f"calib-{i}"
            rec = client.exchange(req)
            assert rec.ok, rec.error_detail
            assert rec.prompt_tokens == system_n + user_n + overhead
    finally:
        client.close()


def test_real_metrics_fixture_parses_like_live(vllm_server) -> None:
    """The stored sample (tests/fixtures/vllm_real/metrics.txt) has the live series names."""
    from pathlib import Path

    stored = parse_metrics(
        (Path(__file__).parents[1] / "fixtures/vllm_real/metrics.txt").read_text()
    )
    live = parse_metrics(vllm_server.metrics_text())
    for group in ("counters", "gauges", "labelled", "histograms"):
        assert set(stored[group]) == set(live[group]), group


def test_prepared_request_id_is_echoed(vllm_server) -> None:
    client = Client(vllm_server.base_url)
    try:
        body = {"model": vllm_server.model, "prompt": "hi", "max_tokens": 2, "stream": False}
        rec = client.exchange(
            PreparedRequest(
                path="/v1/completions",
                body=json.dumps(body).encode(),
                stream=False,
                endpoint="completions",
                request_id="abc123",
            )
        )
    finally:
        client.close()
    assert rec.ok and rec.response_id == "cmpl-abc123"
