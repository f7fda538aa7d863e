"""Does analysis scale? Time `compare` and `report` on synthetic runs of 10k to 1M requests.

Builds two paired run directories per size in agentload's formats (requests.jsonl and
sessions.jsonl rows start from records.py's dataclasses so every field is there; run.json
carries what finalize writes that the analysis reads, including the summary, and stats.json
the mergeable aggregate), B a little slower than A. Rows come from vectorised numpy draws
and are written with orjson in bulk. Then, each in its own process:

* ``python -m workload.cli compare A B`` and ``python -m workload.cli report A``;
* the run summary rebuilt from A's files (what finalize does when a run's live counts
  disagree with the JSONL: workload.run.reconcile)

and prints wall time, CPU time, peak RSS of the child (psutil polling) and report.html's size.

    python bench/bench_analysis.py                  # 10k and 100k requests
    python bench/bench_analysis.py --sizes 1000000  # on demand: a million
    python bench/bench_analysis.py --paired         # B pairs with A by session (canary)
    python bench/bench_analysis.py --dir /tmp/runs  # keep the runs, reuse them next time

Figures depend on the machine and its load; nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
from bench_generator import run_child

from workload.measure.artifacts import SCHEMA_VERSION, write_json
from workload.measure.records import RequestRecord, SessionRecord
from workload.measure.stats import Aggregate
from workload.plan.loading import load_profile

STEPS = 10  # requests per session
CLASSES = ("agent", "chat")
BATCH = 100_000  # rows serialised per write


def _request_rows(n: int, rng: np.random.Generator, slow: float, t0: float, span_s: float):
    """Yield lists of requests.jsonl rows (dicts), BATCH at a time."""
    base = RequestRecord(run_id="synthetic", target="http://127.0.0.1:8000", model="m").to_json()
    for lo in range(0, n, BATCH):
        k = min(BATCH, n - lo)
        idx = np.arange(lo, lo + k)
        ttft = rng.lognormal(np.log(200), 0.4, k) * slow
        itl = rng.lognormal(np.log(20), 0.2, k) * slow
        out = rng.integers(32, 160, k)
        prompt = rng.integers(500, 8000, k)
        err = rng.random(k) < 0.005
        t_start = t0 + np.sort(rng.random(k)) * span_s
        rows = []
        for j in range(k):
            i = int(idx[j])
            d = dict(base)
            e2e = float(ttft[j] + itl[j] * (out[j] - 1))
            d.update(
                user_class=CLASSES[(i // STEPS) % 2],
                session_id=f"s{i // STEPS:07d}",
                step=i % STEPS,
                request_id=f"{i:024x}",
                t_start=round(float(t_start[j]), 6),
                prompt_tokens=int(prompt[j]),
                cached_tokens=int(prompt[j]) // 2,
            )
            if err[j]:
                d.update(status="error", error_kind="http_status", http_status=500, e2e_ms=5.0)
            else:
                it = round(float(itl[j]), 3)
                d.update(
                    http_status=200,
                    ttft_ms=round(float(ttft[j]), 3),
                    e2e_ms=round(e2e, 3),
                    itl_ms={"mean": it, "p50": it, "p99": round(it * 1.6, 3), "max": it * 2},
                    tpot_ms=it,
                    chunks=int(out[j]),
                    completion_tokens=int(out[j]),
                    finish_reason="stop",
                )
            rows.append(d)
        yield rows


def write_run(path: Path, n: int, seed: int, slow: float, run_seed: int | None = None) -> float:
    """One synthetic run directory of ``n`` requests; returns seconds spent.

    ``run_seed`` is the seed run.json records (default ``seed``): the same on both sides,
    the runs pair by session like a seeded canary; different, they compare unpaired.
    """
    t_gen = time.perf_counter()
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    span_s = max(60.0, n / 200)  # 200 requests/s
    started = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    t0 = started.timestamp()
    agg = Aggregate()
    rf = set(RequestRecord.__dataclass_fields__)
    with open(path / "requests.jsonl", "wb") as fh:
        for rows in _request_rows(n, rng, slow, t0, span_s):
            fh.write(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
            for r in rows:
                agg.add_request(RequestRecord(**{k: v for k, v in r.items() if k in rf}))
    sessions = []
    for s in range(-(-n // STEPS)):
        rec = SessionRecord(
            run_id="synthetic",
            user_class=CLASSES[s % 2],
            session_id=f"s{s:07d}",
            t_start=t0 + s * STEPS / n * span_s,
            steps_planned=STEPS,
            steps_done=STEPS,
            duration_ms=STEPS * 2500.0,
            requests=STEPS,
        )
        agg.add_session(rec)
        sessions.append(rec.to_json())
    (path / "sessions.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in sessions) + b"\n")
    profile = load_profile("quickstart")
    write_json(path / "stats.json", agg.to_dict())
    write_json(
        path / "run.json",
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": path.name,
            "started_at": started.isoformat(timespec="milliseconds"),
            "ended_at": (started + dt.timedelta(seconds=span_s)).isoformat(timespec="milliseconds"),
            "duration_s": span_s,
            "argv": ["run", "--host", "http://127.0.0.1:8000"],
            "profile_name": profile.name,
            "profile": profile.model_dump(mode="json"),
            "seed": seed if run_seed is None else run_seed,
            "labels": {},
            "target": {"base_url": "http://127.0.0.1:8000"},
            "model": "m",
            "tokenizer": "tiktoken",
            "workers": 1,
            "users": 200,
            "summary": agg.summary(span_s),
            "exit_code": 0,
        },
    )
    return time.perf_counter() - t_gen


# The run summary's slow path (workload.run.reconcile): count the JSONL lines, rebuild the
# aggregate from them (what finalize does when the live counts disagree with the files).
SUMMARY = (
    "import sys; from pathlib import Path; from workload.measure import artifacts; "
    "from workload.run.reconcile import rebuild; p = Path(sys.argv[1]); "
    "artifacts.count_lines(p, 'requests'); artifacts.count_lines(p, 'sessions'); "
    "rebuild(p, {}).summary(60.0)"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument(
        "--paired", action="store_true", help="B records A's seed: sessions pair (seeded canary)"
    )
    ap.add_argument(
        "--dir", type=Path, help="keep the generated runs here (DIR/N[-paired]/A, B) and reuse them"
    )
    args = ap.parse_args()
    print(f"{'requests':>9s} {'step':8s} {'wall s':>7s} {'cpu s':>6s} {'peak RSS MiB':>12s}  notes")
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
            root = Path(tmp) if args.dir is None else args.dir / f"{n}{'-paired' if args.paired else ''}"  # fmt: skip
            a, b = root / "A", root / "B"
            if not (a / "run.json").exists() or not (b / "run.json").exists():
                for d in (a, b):
                    if d.exists():
                        shutil.rmtree(d)
                gen_s = write_run(a, n, 1, 1.0) + write_run(b, n, 2, 1.05, 1 if args.paired else None)  # fmt: skip
            else:
                gen_s = 0.0
            size = (a / "requests.jsonl").stat().st_size / 2**20
            print(f"{n:9d} {'generate':8s} {gen_s:7.1f} {'':>6s} {'':>12s}  2 runs, "
                  f"requests.jsonl {size:.0f} MiB each", flush=True)  # fmt: skip
            py = sys.executable
            for step, cmd in (
                ("compare", [py, "-m", "workload.cli", "compare", str(a), str(b)]),
                ("report", [py, "-m", "workload.cli", "report", str(a)]),
                ("summary", [py, "-c", SUMMARY, str(a)]),
            ):
                c = run_child(cmd, timeout_s=1800, poll_s=0.05)
                note = f"exit {c.returncode}"
                html = a / "report.html"
                if step == "report" and html.exists():
                    note += f", report.html {html.stat().st_size / 2**20:.2f} MiB"
                if step == "compare" or c.returncode not in (0, 1, 3):  # 3: a verdict of worse
                    note += ": " + (c.output.strip().splitlines() or [""])[-1][:200]
                print(f"{n:9d} {step:8s} {c.wall_s:7.1f} {c.cpu_s:6.1f} {c.peak_rss_mib:12.0f}  "
                      f"{note}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
