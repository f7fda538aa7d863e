"""`agentload sim calibrate`: fit the step cost model from a real OpenAI-compatible server.

The sweep is designed so each measurement is one step of a known shape (StepShape), and the
cost model is then a linear least-squares fit over those shapes:

- **prefill**: one request at a time, unique prompts of several lengths, `max_tokens=1`:
  its TTFT is the API path plus one prefill step of L new tokens (attention ~ L^2/2 pairs);
- **decode**: B concurrent requests with short or long prompts, `ignore_eos`: after every one
  has started, the gap between chunks of a stream is one decode step of B sequences over
  their contexts (the median gap, so a stray prefill or a hiccup does not count);
- **cache**: one prompt sent twice: the second TTFT says whether prefix caching is on.

Identifiability: a decode step's constant is `step_overhead_ms` (+ `decode_ms_base`, which
the fit pins at 0: one intercept cannot be split), and a prefill row's extra constant is the
API-server path (`api_ms_per_request`). Scheduler limits and the KV pool come from the
server's `vllm:cache_config_info` (/metrics) and `/server_info` where it exposes them.
Any http:// or https:// server (the key, where it needs one, from $OPENAI_API_KEY or the
variable --api-key-env names, sent only in the Authorization header); from another host the
network's round trip lands in the fitted API constant, as a client there sees it. Every
request has a timeout; the sweep is bounded (~130 requests).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import statistics
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import yaml

from workload.errors import ArgParser, SetupError, SimConfigError, UsageError
from workload.sim import stamped
from workload.sim.apisplit import split_api
from workload.sim.config import build_config, parse_assignments
from workload.sim.costmodel import StepShape
from workload.sim.specfit import SpecCounters, fit_acceptance, fit_cold, read_counters
from workload.sim.stamped import BURST_SEEN, Streamed

# The coefficients the sweep identifies, with their feature in StepShape.features() order
# (decode_ms_base and draft_ms_per_token are not identified: pinned, see module docstring).
FITTED = (
    "step_overhead_ms",
    "prefill_ms_per_token",
    "decode_ms_per_seq",
    "attn_ms_per_kctx",
    "attn_ms_per_mpair",
    "api_ms_per_request",
)
PREFILL_LENS = (64, 512, 1024, 2048)
DECODE_BATCHES = (1, 2, 4, 8)
DECODE_CONTEXTS = (32, 1024)
REPEATS = 5
BURST = 8
BURST_TOKENS = 64
DECODE_REPEATS = 2
# A stream whose chunks this client saw spread over less than this share of the server's own
# generation time (vLLM's per-request `metrics`) was read in one burst after the client had
# been descheduled, not paced by the server's steps: on a busy host all 20 chunks of a stream
# came within 0.2 ms of a 40 ms generation, which fitted 0.007 ms decode steps. Such streams
# time nothing and are sent again (stamped.Streamed.read_in_burst).
DECODE_TRIES = 4  # runs of a point's streams, at most, to get DECODE_REPEATS timed ones
DECODE_TOKENS = 64  # enough steps past the start when a step carries 1 + k tokens
COLD_TOKENS = 16  # the short streams that tell a cold start from random misses
COLD_STREAMS = 6
TIMEOUT_S = 60.0


@dataclass
class Sample:
    """One measured step: its shape, whether it carried the API path, and its duration."""

    shape: StepShape
    api: bool
    ms: float


@dataclass
class Target:
    """The server under calibration."""

    host: str
    port: int
    model: str
    max_model_len: int
    info: dict[str, str] = field(default_factory=dict)
    https: bool = False
    prefix: str = ""  # a path before /v1 (a gateway's route), "" for a server's root
    api_key: str | None = field(default=None, repr=False)

    def connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=TIMEOUT_S)

    def headers(self, **extra: str) -> dict[str, str]:
        if self.api_key:
            extra["Authorization"] = f"Bearer {self.api_key}"
        return extra


def parse_host(url: str) -> Target:
    """The server at an http:// or https:// URL (its model not yet known); UsageError else."""
    u = urllib.parse.urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(f"--host must be an http:// or https:// URL, got {url!r}")
    if u.username or u.password:
        raise UsageError(
            "--host must not carry credentials; put the API key in $OPENAI_API_KEY "
            "(or name its variable with --api-key-env)"
        )
    try:
        port = u.port
    except ValueError:
        raise UsageError(f"--host has a bad port: {url!r}") from None
    https = u.scheme == "https"
    return Target(
        u.hostname, port or (443 if https else 80), "", 0, https=https, prefix=u.path.rstrip("/")
    )


def _get(t: Target, path: str) -> tuple[int, str]:
    conn = t.connection()
    try:
        conn.request("GET", t.prefix + path, headers=t.headers())
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def discover(url: str, api_key: str | None = None) -> Target:
    """Model, max_model_len and the flags the server shows (/v1/models, /metrics, /server_info)."""
    target = parse_host(url)
    target.api_key = api_key
    try:
        status, body = _get(target, "/v1/models")
    except (OSError, http.client.HTTPException) as e:
        raise SetupError(f"cannot reach {url}: {e}; start the server first") from None
    if status in (401, 403):
        raise SetupError(
            f"{url}/v1/models answered {status}: the server wants an API key; put it in "
            "$OPENAI_API_KEY (or name its variable with --api-key-env)"
        )
    if status != 200:
        raise SetupError(f"{url}/v1/models answered {status}; is it an OpenAI-compatible server?")
    model = json.loads(body)["data"][0]
    target.model = model["id"]
    target.max_model_len = int(model.get("max_model_len") or 2048)
    status, text = _get(target, "/metrics")
    if status == 200:
        m = re.search(r"^vllm:cache_config_info\{([^}]*)\}", text, re.M)
        if m:
            target.info.update(dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))))
    status, text = _get(target, "/server_info")
    if status == 200:
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            found = re.search(rf"{key}=(\d+)", text)
            if found:
                target.info[key] = found.group(1)
    status, text = _get(target, "/version")
    if status == 200:
        target.info["version"] = json.loads(text).get("version", "")
    return target


def _prompt(rng: random.Random, words: int) -> str:
    # a nonce first, so no two prompts share a cached block by accident
    return f"n{rng.getrandbits(48)} " + " ".join(f"w{rng.randrange(10_000)}" for _ in range(words))


def stream_once(t: Target, text: str, max_tokens: int) -> tuple[float, list[float], int]:
    """One streamed chat request: (TTFT s, chunk arrival times s, prompt tokens)."""
    got = stream_timed(t, text, max_tokens)
    return got.arrivals[0], got.arrivals, got.prompt_tokens


def stream_timed(t: Target, text: str, max_tokens: int) -> Streamed:
    """One streamed chat request, with the server's generation time where it says it.

    Over plain http each chunk is timed by the kernel's receive stamp (stamped.py), so a
    client that waited for a CPU does not charge its wait to the server; over https, when
    Python read it."""
    body = json.dumps({
        "model": t.model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    })  # fmt: skip
    path = t.prefix + "/v1/chat/completions"
    headers = t.headers(**{"Content-Type": "application/json"})
    tls = t.connection if t.https else None
    return stamped.timed_stream(t.host, t.port, path, headers, body.encode(), TIMEOUT_S, tls)


def sweep_prefill(t: Target, rng: random.Random, per_word: float) -> list[Sample]:
    """TTFT of lone requests over prompt lengths (each its own prefill step)."""
    out = []
    for length in PREFILL_LENS:
        if length + 16 > t.max_model_len:
            continue
        ttfts, tokens = [], []
        for _ in range(REPEATS):
            ttft, _, got = stream_once(t, _prompt(rng, int(length / per_word)), 1)
            ttfts.append(ttft * 1000.0)
            tokens.append(got)
        # the median of the repeats: one host stall must not become prefill cost
        shape = StepShape()
        shape.add(0, int(statistics.median(tokens)), prefill=True)
        out.append(Sample(shape, True, statistics.median(ttfts)))
    return out


def sweep_burst(t: Target, rng: random.Random, per_word: float) -> tuple[int, float]:
    """(prompt tokens, median over REPEATS of the mean TTFT ms) of BURST lone-token requests
    sent together: how far the API path makes them queue (`apisplit`)."""
    means, tokens = [], []
    for _ in range(REPEATS):
        texts = [_prompt(rng, int(BURST_TOKENS / per_word)) for _ in range(BURST)]
        with ThreadPoolExecutor(max_workers=BURST) as pool:
            results = list(pool.map(lambda x: stream_once(t, x, 1), texts))
        means.append(1000.0 * statistics.fmean(r[0] for r in results))
        tokens += [r[2] for r in results]
    return int(statistics.median(tokens)), statistics.median(means)


def sweep_decode(
    t: Target, rng: random.Random, per_word: float, chunks: list[int] | None = None
) -> list[tuple[int, int, float]]:
    """(batch, prompt tokens, decode step ms) of B concurrent streams once all have started;
    each stream's content chunk count is appended to `chunks` (one chunk per engine step).

    A stream's step is its mean chunk gap between its fourth and its third-last chunk (the
    first steps can carry other streams' prefill): the mean, not the median, because a
    server whose API process falls behind its engine sends several steps' chunks back to
    back after one long gap, which keeps the sum of the gaps but not their median. The
    sample is the median over the streams of DECODE_REPEATS runs. A stream this client read
    in one burst (`Streamed.read_in_burst`: only a server that reports its generation time
    tells) is not timed and its run is sent again, up to DECODE_TRIES
    runs; when that leaves a point untimed, the host is too busy and calibration stops with
    that (a preset fitted on bursts would claim steps of microseconds). What the step carried
    (one token per sequence, or one plus the drafts it verified) is decided by `decode_samples`.
    """
    out = []
    bursts = streams = 0
    for ctx in DECODE_CONTEXTS:
        if ctx + DECODE_TOKENS + 16 > t.max_model_len:
            continue
        for batch in DECODE_BATCHES:
            steps: list[float] = []
            for _ in range(DECODE_TRIES):
                texts = [_prompt(rng, int(ctx / per_word)) for _ in range(batch)]
                with ThreadPoolExecutor(max_workers=batch) as pool:
                    results = list(pool.map(lambda x: stream_timed(t, x, DECODE_TOKENS), texts))
                for r in results:
                    if chunks is not None:  # every stream: the spec counters saw them all
                        chunks.append(len(r.arrivals))
                    window = r.arrivals[3:-2]
                    if len(window) < 2:
                        continue
                    streams += 1
                    if r.read_in_burst():
                        bursts += 1  # times the client, not the server
                        continue
                    steps.append((window[-1] - window[0]) / (len(window) - 1))
                if len(steps) >= DECODE_REPEATS * batch:
                    break
            if not steps:
                continue
            prompt = int(statistics.median(r.prompt_tokens for r in results))
            out.append((batch, prompt, statistics.median(steps) * 1000.0))
    if bursts and len(out) < len(DECODE_BATCHES):
        raise SetupError(
            f"calibration could not time the server's decode steps: {bursts} of {streams} "
            "answer streams reached this client in one burst (their chunks spread over less "
            f"than {BURST_SEEN:.0%} of the server's generation time), so this host was too "
            "busy to see them paced; calibrate from a quiet host (close other load) or one "
            "next to the server"
        )
    return out


def decode_samples(measured: list[tuple[int, int, float]], drafts: int) -> list[Sample]:
    """Decode steps of a known shape: each of B sequences verifies `drafts` draft tokens
    (0 without speculation), so it computes 1 + drafts tokens over its context."""
    out = []
    for batch, prompt, ms in measured:
        shape = StepShape()
        for _ in range(batch):
            shape.add(prompt + DECODE_TOKENS // 2, 1 + drafts, prefill=False, drafts=drafts)
        out.append(Sample(shape, False, ms))
    return out


def decode_steps_seen(chunks: list[int], delta: SpecCounters) -> float:
    """The decode sweep's decode steps: every content chunk after a stream's first is one.

    Both counts at hand are lower bounds: chunks merge when the API process falls behind
    (two steps, one chunk), and the counters' generation - requests - accepted misses the
    drafts accepted past max_tokens. Every stream asks for the same DECODE_TOKENS, so the
    median stream's chunks stand for each (a merge hits few), and the larger bound wins.
    """
    if not chunks:
        return 0.0
    seen = (statistics.median(chunks) - 1) * len(chunks)
    return float(max(seen, delta.generation_tokens - delta.requests - delta.accepted))


def sweep_cold(t: Target, rng: random.Random, per_word: float) -> tuple[list[int], SpecCounters]:
    """Lone short streams, one at a time: their chunk counts and the spec counters' change."""
    before = read_spec(t)
    chunks = []
    for _ in range(COLD_STREAMS):
        _, arrivals, _ = stream_once(t, _prompt(rng, int(64 / per_word)), COLD_TOKENS)
        chunks.append(len(arrivals))
    return chunks, read_spec(t).minus(before)


def read_spec(t: Target) -> SpecCounters:
    """The server's spec-decode counters now (all zero where /metrics has none)."""
    try:
        status, text = _get(t, "/metrics")
    except OSError:
        return SpecCounters()
    return read_counters(text) if status == 200 else SpecCounters()


def fit(samples: Sequence[Sample]) -> dict[str, float]:
    """Non-negative least squares over FITTED (coefficients that come out < 0 are dropped)."""
    rows = []
    for s in samples:
        f = s.shape.features()  # COEFFICIENTS order
        rows.append([f[0], f[1], f[3], f[5], f[6], 1.0 if s.api else 0.0])
    x = np.array(rows)
    y = np.array([s.ms for s in samples])
    active = list(range(len(FITTED)))
    coef = np.zeros(len(FITTED))
    for _ in range(len(FITTED)):
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0.0
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return {name: round(float(v), 6) for name, v in zip(FITTED, coef, strict=True)}


def prefix_caching_on(t: Target, rng: random.Random, per_word: float) -> bool:
    """Whether a repeated long prompt's TTFT drops below half of its first."""
    text = _prompt(rng, int(min(1024, t.max_model_len // 2) / per_word))
    first, _, _ = stream_once(t, text, 1)
    second, _, _ = stream_once(t, text, 1)
    return second < 0.5 * first


def sweep_speculation(
    t: Target, rng: random.Random, per_word: float
) -> tuple[list[tuple[int, int, float]], dict[str, float | int | str] | None, dict]:
    """The decode sweep and the short cold streams, with the spec counters around each:
    (decode measurements, spec settings or None, what they came from)."""
    before = read_spec(t)
    chunks: list[int] = []
    measured = sweep_decode(t, rng, per_word, chunks)
    delta = read_spec(t).minus(before)
    long_steps = decode_steps_seen(chunks, delta)
    spec = fit_acceptance(delta, long_steps)
    cold_chunks, cold = sweep_cold(t, rng, per_word)
    if spec is not None and chunks and cold_chunks:
        spec["spec_cold_steps"], spec["spec_propose_rate"] = fit_cold(
            (
                decode_steps_seen(cold_chunks, cold) / len(cold_chunks),
                cold.drafts / len(cold_chunks),
            ),
            (long_steps / len(chunks), delta.drafts / len(chunks)),
        )
    source = {
        "counters": "vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens, "
        "_num_accepted_tokens_per_pos, vllm:generation_tokens, vllm:request_success "
        "(changes over the decode sweep)",
        "drafts": delta.drafts,
        "draft_tokens": delta.draft_tokens,
        "accepted": delta.accepted,
        "accepted_per_pos": delta.accepted_per_pos,
        "generation_tokens": delta.generation_tokens,
        "requests": delta.requests,
        "decode_steps_seen": long_steps,
        "cold_streams": {"tokens": COLD_TOKENS, "chunks": cold_chunks, "drafts": cold.drafts},
    }
    return measured, spec, source


def calibrate(
    url: str, seed: int = 0, given: Sequence[str] = (), api_key: str | None = None
) -> dict:
    """Run the sweep against `url` and return the preset document.

    `given` are KEY=VALUE settings the operator knows and the server does not show (say
    `max_num_batched_tokens=2048` from its start-up log); they win over what was read and
    are recorded under `source.given`.
    """
    t = discover(url, api_key)
    rng = random.Random(seed)
    _, _, probe = stream_once(t, _prompt(rng, 200), 1)
    per_word = max(probe, 1) / 201.0
    prefill = sweep_prefill(t, rng, per_word)
    measured, spec, spec_source = sweep_speculation(t, rng, per_word)
    burst_tokens, burst_ms = sweep_burst(t, rng, per_word)
    # the median step of a stream carries drafts when the proposer drafts on most steps
    drafts = 0
    if spec is not None and float(spec["spec_propose_rate"]) >= 0.5:
        drafts = int(spec["spec_k"])
    samples = prefill + decode_samples(measured, drafts)
    if len(samples) < len(FITTED) + 2:
        raise UsageError(f"max_model_len {t.max_model_len} leaves too few sweep points to fit")
    coef = fit(samples)
    settings: dict[str, object] = dict(coef)
    settings["decode_ms_base"] = 0.0
    # draft verification is inside decode_ms_per_seq and the attention terms: every decode
    # step of the sweep verified the same k drafts, so a per-draft cost cannot be split off
    settings["draft_ms_per_token"] = 0.0
    settings.update(spec if spec is not None else {"spec_k": 0})
    settings["max_model_len"] = t.max_model_len
    settings["model"] = t.model
    shown = t.info.get("enable_prefix_caching")
    # the server's own label wins; timing only decides where it is not exposed (a small
    # model's TTFT can be mostly API path, so a cache hit need not halve it)
    settings["enable_prefix_caching"] = (
        shown == "True" if shown in ("True", "False") else prefix_caching_on(t, rng, per_word)
    )
    for key in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens"):
        if t.info.get(key, "None").isdigit():
            settings[key] = int(t.info[key])
    known = dict(parse_assignments(list(given), "--set"))
    settings.update(known)
    # the fitted API constant, split into a serial and an overlapping part by the burst
    cfg = build_config("default", file_settings=("calibrating", settings))
    settings.update((key, getattr(cfg, key)) for key in known)  # typed, as the twin reads them
    serial, overlap = split_api(cfg, coef["api_ms_per_request"], BURST, burst_tokens, burst_ms)
    settings["api_ms_per_request"], settings["api_latency_ms"] = serial, overlap
    measured_ms = [s.ms for s in samples]
    residual = [round(s.ms - predict(coef, s), 3) for s in samples]
    return {
        "name": f"calibrated-{t.model.replace('/', '-')}",
        "description": f"fitted by agentload sim calibrate from {url}",
        "source": {
            "server": url,
            "model": t.model,
            "version": t.info.get("version", ""),
            "flags": {k: v for k, v in t.info.items() if k != "version"},
            "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "given": known,
            "samples": len(samples),
            "burst": {"requests": BURST, "prompt_tokens": burst_tokens, "ttft_ms_mean": burst_ms},
            "measured_ms_p50": round(float(np.median(measured_ms)), 3),
            "residual_ms_p50_abs": round(float(np.median(np.abs(residual))), 3),
            "r2": round(r_squared(measured_ms, residual), 4),
            "spec_decode": dict(spec_source, decode_sample_drafts=drafts),
        },
        "settings": settings,
    }


def r_squared(measured: Sequence[float], residual: Sequence[float]) -> float:
    """The share of the measured steps' variance the fitted model explains (1 - SSres/SStot)."""
    y = np.asarray(measured, dtype=float)
    total = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum(np.square(residual))) / total if total > 0 else 0.0


def predict(coef: dict[str, float], s: Sample) -> float:
    """The fitted model's duration for one sample, in ms."""
    f = s.shape.features()
    vals = (f[0], f[1], f[3], f[5], f[6], 1.0 if s.api else 0.0)
    return sum(coef[n] * v for n, v in zip(FITTED, vals, strict=True))


def main_calibrate(argv: list[str]) -> int:
    """`agentload sim calibrate --host URL -o preset.yaml`."""
    p = ArgParser(
        prog="agentload sim calibrate", description="Fit a simulator preset from a running server."
    )
    p.add_argument(
        "--host",
        required=True,
        help="server URL, http:// or https:// (http://127.0.0.1:8000); from another host the "
        "network's round trip is part of the fitted API constant",
    )
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the server's API key, if it wants one "
        "(default OPENAI_API_KEY); sent only in the Authorization header, never written",
    )
    p.add_argument("-o", "--output", required=True, help="preset file to write (YAML)")
    p.add_argument("--seed", type=int, default=0, help="seed for the prompts")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting the server does not expose, as you know it (repeatable), e.g. "
        "max_num_batched_tokens=2048; recorded in the file as given",
    )
    args = p.parse_args(argv)
    try:
        doc = calibrate(args.host, args.seed, args.set, os.environ.get(args.api_key_env) or None)
    except (OSError, http.client.HTTPException) as e:  # the server went away mid-sweep
        raise SetupError(f"calibration lost {args.host}: {e or type(e).__name__}") from None
    try:
        with open(args.output, "w", encoding="utf-8") as fh:
            yaml.safe_dump(doc, fh, sort_keys=False)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
    print(f"wrote {args.output}: " + ", ".join(f"{k}={v}" for k, v in doc["settings"].items()))
    return 0


def load_preset_file(path: str) -> tuple[str, dict[str, object]]:
    """(name, settings) of a preset file; SimConfigError if it is not one."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as e:
        raise SimConfigError(f"cannot read preset file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise SimConfigError(f"preset file {path} is not YAML: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict):
        raise SimConfigError(f"preset file {path} needs a 'settings:' mapping")
    return str(doc.get("name") or path), doc["settings"]
