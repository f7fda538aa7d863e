"""`agentload sim calibrate`: the fit on synthetic steps, the file it writes, and recovery of
a simulator's own known parameters over HTTP."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from workload.errors import SetupError, SimConfigError, UsageError
from workload.sim import calibrate as calibrate_module
from workload.sim.calibrate import (
    DECODE_BATCHES,
    DECODE_CONTEXTS,
    DECODE_REPEATS,
    FITTED,
    Sample,
    Streamed,
    Target,
    calibrate,
    discover,
    fit,
    load_preset_file,
    parse_host,
    r_squared,
    stream_once,
    sweep_decode,
)
from workload.sim.config import build_config
from workload.sim.costmodel import StepShape
from workload.sim.inprocess import SimThread

TRUE = {
    "step_overhead_ms": 8.0,
    "prefill_ms_per_token": 0.15,
    "decode_ms_per_seq": 1.5,
    "attn_ms_per_kctx": 4.0,
}
# What a recovered coefficient may miss by (a noisy shared host; see docs/simulator.md).
TOLERANCE = 0.15


def synthetic(coef: dict[str, float]) -> list[Sample]:
    out = []
    for n in (64, 512, 2048):
        s = StepShape()
        s.add(0, n, prefill=True)
        ms = (
            coef["step_overhead_ms"]
            + coef["api_ms_per_request"]
            + coef["prefill_ms_per_token"] * n
            + coef["attn_ms_per_kctx"] * n / 1e3
            + coef["attn_ms_per_mpair"] * n * (n + 1) / 2 / 1e6
        )
        out.append(Sample(s, True, ms))
    for batch in (1, 4, 8):
        for ctx in (32, 1024):
            s = StepShape()
            for _ in range(batch):
                s.add(ctx, 1, prefill=False)
            ms = (
                coef["step_overhead_ms"]
                + coef["decode_ms_per_seq"] * batch
                + coef["attn_ms_per_kctx"] * batch * (ctx + 1) / 1e3
                + coef["attn_ms_per_mpair"] * batch * (ctx + 1) / 1e6
            )
            out.append(Sample(s, False, ms))
    return out


def test_the_fit_recovers_exact_coefficients_from_noiseless_steps():
    coef = dict(TRUE, attn_ms_per_mpair=2.0, api_ms_per_request=3.0)
    got = fit(synthetic(coef))
    assert set(got) == set(FITTED)
    for name, value in coef.items():
        assert got[name] == pytest.approx(value, rel=1e-4)


def test_the_fit_drops_a_coefficient_that_would_come_out_negative():
    coef = dict(TRUE, attn_ms_per_mpair=0.0, api_ms_per_request=0.0)
    samples = synthetic(coef)
    samples[2].ms -= 5.0  # the longest prefill faster than linear: a negative quadratic term
    got = fit(samples)
    assert all(v >= 0 for v in got.values())
    assert got["attn_ms_per_mpair"] == 0.0


def _streams(monkeypatch: pytest.MonkeyPatch, burst_every: int) -> list[int]:
    """stream_timed answering 20 chunks the server generated 2 ms apart (38 ms, its
    `generation_time_ms`), which reach the client 2 ms apart, or (every `burst_every`-th
    stream, when > 0) all within 0.2 ms: a client descheduled while the server streamed.
    Returns the list the fake appends each stream's number to."""
    sent: list[int] = []

    def fake(t: Target, text: str, max_tokens: int) -> Streamed:
        sent.append(len(sent))
        gap = 1e-5 if burst_every and len(sent) % burst_every == 0 else 2e-3
        return Streamed([0.01 + i * gap for i in range(20)], 40, 38.0)

    monkeypatch.setattr(calibrate_module, "stream_timed", fake)
    return sent


def test_only_a_stream_seen_far_shorter_than_the_server_generated_it_is_a_burst():
    assert Streamed([0.0, 1e-5, 2e-5, 3e-5], 9, 30.0).read_in_burst()
    assert not Streamed([0.0, 0.01, 0.02, 0.03], 9, 30.0).read_in_burst()
    # a server this fast is timed as it is; one that says nothing cannot be doubted
    assert not Streamed([0.0, 1e-5, 2e-5, 3e-5], 9, 0.03).read_in_burst()
    assert not Streamed([0.0, 1e-5, 2e-5, 3e-5], 9, None).read_in_burst()


TARGET = Target("127.0.0.1", 1, "m", 4096)


def test_a_decode_stream_read_in_one_burst_is_sent_again_not_timed(monkeypatch):
    calm = _streams(monkeypatch, 0)
    sweep_decode(TARGET, random.Random(0), 1.0)
    clean = len(calm)
    sent = _streams(monkeypatch, 3)
    got = sweep_decode(TARGET, random.Random(0), 1.0)
    assert len(got) == len(DECODE_BATCHES) * len(DECODE_CONTEXTS)
    assert all(ms == pytest.approx(2.0) for _, _, ms in got)  # no burst reached a step
    assert clean == DECODE_REPEATS * sum(DECODE_BATCHES) * len(DECODE_CONTEXTS)
    assert len(sent) > clean  # the burst streams' runs were sent again


def test_decode_steps_nobody_could_time_stop_calibration_with_the_reason(monkeypatch):
    _streams(monkeypatch, 1)  # every stream a burst
    with pytest.raises(SetupError, match=r"too busy .*calibrate from a quiet host") as e:
        sweep_decode(TARGET, random.Random(0), 1.0)
    assert "in one burst" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("url", "host", "port", "https", "prefix"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1", 8000, False, ""),
        ("http://10.0.0.1:8000/", "10.0.0.1", 8000, False, ""),  # a GPU box: any host
        ("https://vllm.example.com", "vllm.example.com", 443, True, ""),
        ("https://gw.example.com:8443/serving/llama/", "gw.example.com", 8443, True,
         "/serving/llama"),  # a gateway's route before /v1
    ],
)  # fmt: skip
def test_calibration_targets_any_http_or_https_server(url, host, port, https, prefix):
    t = parse_host(url)
    assert (t.host, t.port, t.https, t.prefix) == (host, port, https, prefix)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("127.0.0.1:80", "must be an http:// or https:// URL"),
        ("ftp://127.0.0.1", "must be an http:// or https:// URL"),
        ("http://user:sk-secret@127.0.0.1:8000", "must not carry credentials"),
        ("http://127.0.0.1:99999", "bad port"),
    ],
)
def test_a_host_that_is_no_server_url_is_refused(url, said):
    with pytest.raises(UsageError, match=said) as e:
        parse_host(url)
    assert "sk-secret" not in str(e.value)


class _KeyedServer(ThreadingHTTPServer):
    """An OpenAI-compatible stub on 127.0.0.1 under a route prefix that wants a bearer key:
    /v1/models and one streamed chat answer; every request's path and Authorization kept."""

    KEY = "sk-calibrate-test"
    PREFIX = "/serving/m"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _allowed(self) -> bool:
                outer.seen.append((self.path, self.headers.get("Authorization")))
                if self.headers.get("Authorization") != f"Bearer {outer.KEY}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return False
                return True

            def do_GET(self) -> None:
                if not self._allowed():
                    return
                if self.path != outer.PREFIX + "/v1/models":
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"data": [{"id": "m", "max_model_len": 4096}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                if not self._allowed():
                    return
                chunks = [
                    {"choices": [{"delta": {"content": "a"}}]},
                    {"choices": [{"delta": {"content": "b"}}]},
                    {"choices": [], "usage": {"prompt_tokens": 7}},
                ]
                body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
                body += b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def keyed_server():
    srv = _KeyedServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_api_key_goes_in_the_authorization_header_of_every_request(keyed_server):
    url = f"http://127.0.0.1:{keyed_server.server_port}{keyed_server.PREFIX}"
    t = discover(url, keyed_server.KEY)
    assert (t.model, t.max_model_len) == ("m", 4096)
    ttft, arrivals, prompt_tokens = stream_once(t, "hello", 2)
    assert len(arrivals) == 2 and prompt_tokens == 7 and ttft == arrivals[0]
    paths = [path for path, _ in keyed_server.seen]
    assert paths[0] == "/serving/m/v1/models" and paths[-1] == "/serving/m/v1/chat/completions"
    assert all(path.startswith("/serving/m/") for path in paths)
    assert {auth for _, auth in keyed_server.seen} == {f"Bearer {keyed_server.KEY}"}
    assert keyed_server.KEY not in repr(t)


def test_a_server_that_wants_a_key_says_where_to_put_it(keyed_server):
    url = f"http://127.0.0.1:{keyed_server.server_port}{keyed_server.PREFIX}"
    with pytest.raises(SetupError, match=r"answered 401: the server wants an API key; put it in "
                       r"\$OPENAI_API_KEY \(or name its variable with --api-key-env\)"):  # fmt: skip
        discover(url)
    assert keyed_server.seen == [("/serving/m/v1/models", None)]


def test_the_calibrate_command_reads_the_key_from_the_variable_it_is_told(keyed_server, tmp_path):
    """The command line: the key from --api-key-env's variable reaches the server; without
    it, one line and exit 2 (the stub cannot be swept, so the keyed run stops later, at the
    sweep, with a line that holds no key)."""
    url = f"http://127.0.0.1:{keyed_server.server_port}{keyed_server.PREFIX}"
    argv = [sys.executable, "-m", "workload.sim", "calibrate", "--host", url,
            "-o", str(tmp_path / "p.yaml")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    without = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert without.returncode == 2, without.stderr
    assert without.stderr.count("\n") == 1 and "wants an API key" in without.stderr
    keyed = subprocess.run(
        [*argv, "--api-key-env", "MY_VLLM_KEY"], capture_output=True, text=True, timeout=60,
        env={**env, "MY_VLLM_KEY": keyed_server.KEY},
    )  # fmt: skip
    assert (f"Bearer {keyed_server.KEY}") in {auth for _, auth in keyed_server.seen}
    assert "Traceback" not in keyed.stderr and keyed.stderr.startswith("agentload: error:")
    assert keyed_server.KEY not in keyed.stderr + keyed.stdout


def test_a_preset_file_without_settings_is_refused(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("name: x\n")
    with pytest.raises(SimConfigError, match="settings"):
        load_preset_file(str(bad))


def test_a_preset_file_sets_fields_and_unknown_ones_are_refused(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text(
        yaml.safe_dump(
            {
                "name": "twin",
                "settings": {"prefill_ms_per_token": 0.5, "enable_prefix_caching": False},
            }
        )
    )
    cfg = build_config("default", file_settings=load_preset_file(str(good)))
    assert cfg.preset == "twin" and cfg.prefill_ms_per_token == 0.5
    assert cfg.enable_prefix_caching is False
    good.write_text(yaml.safe_dump({"settings": {"warp_factor": 9}}))
    with pytest.raises(SimConfigError, match="warp_factor"):
        build_config("default", file_settings=load_preset_file(str(good)))


@pytest.mark.slow
def test_calibrating_a_simulator_recovers_its_own_cost_model_and_limits():
    sets = [f"{k}={v}" for k, v in TRUE.items()]
    sets += [
        "decode_ms_base=0",
        "attn_ms_per_mpair=0",
        "spec_k=0",
        "max_model_len=4096",
        "dev_mode=true",
        "max_num_seqs=64",
        "max_num_batched_tokens=4096",
        "enable_prefix_caching=false",
        "num_gpu_blocks=2048",
    ]
    with SimThread("default", sets=sets) as sim:
        doc = calibrate(sim.url)
    got = doc["settings"]
    for name, value in TRUE.items():
        assert got[name] == pytest.approx(value, rel=TOLERANCE), name
    # A spurious quadratic term stays within the same tolerance of the longest prefill as the
    # linear terms: the true model has none, but four prefill lengths let one host stall on
    # the 2048-token median become curvature (CI, 4 xdist workers on 2 cores: 18 ms of 315).
    longest = 8.0 + 0.15 * 2048
    assert got["attn_ms_per_mpair"] * 2048 * 2049 / 2 / 1e6 < TOLERANCE * longest
    assert got["max_num_seqs"] == 64 and got["max_num_batched_tokens"] == 4096
    assert got["num_gpu_blocks"] == 2048 and got["enable_prefix_caching"] is False
    # the simulator steps exactly as the model says: it explains nearly all the variance
    assert doc["source"]["r2"] > 0.98, doc["source"]


def test_r_squared_is_the_share_of_variance_explained():
    assert r_squared([1.0, 2.0, 3.0], [0.0, 0.0, 0.0]) == 1.0
    # residuals as large as the deviations from the mean: nothing explained
    assert r_squared([1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]) == pytest.approx(0.0)
    assert r_squared([2.0, 2.0], [0.1, -0.1]) == 0.0  # no variance to explain


@pytest.mark.slow
def test_the_calibrate_command_writes_a_preset_the_simulator_serves(tmp_path):
    out = tmp_path / "twin.yaml"
    with SimThread("default", sets=["spec_k=0", "max_model_len=2048"]) as sim:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "workload.cli.main",
                "sim",
                "calibrate",
                "--host",
                sim.url,
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "workload.sim", "--preset-file", str(out), "--port", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # the file loaded (a bad one would fail first); the bad port is what stops it
    assert "--port" in listed.stderr and listed.returncode == 2
    assert yaml.safe_load(Path(out).read_text())["source"]["model"] == "agentload/sim-8b"


def test_calibrate_refuses_a_host_that_is_no_url_in_one_line():
    done = subprocess.run(
        [sys.executable, "-m", "workload.sim", "calibrate", "--host", "192.0.2.1:8000",
         "-o", "/dev/null"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "agentload: error: --host must be an http:// or https:// URL, got '192.0.2.1:8000'"
    )


@pytest.mark.slow
def test_a_request_leaves_the_api_stage_when_its_time_is_up_not_a_lag_window_later():
    with SimThread("default", sets=["api_ms_per_request=14", "spec_k=0"]) as sim:
        t = discover(sim.url)
        ttft, arrivals, _ = stream_once(t, "hello there " * 20, 8)
    assert ttft < 0.5  # the driver once stepped at the arrival time until MAX_LAG_S (1 s) passed
    assert len(arrivals) == 8
