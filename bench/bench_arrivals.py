"""Benchmark open-loop arrival accuracy: how late does the generator start sessions?

    python bench/bench_arrivals.py [--rates 10 100 1000 3000] [--seconds 3] [--hold 2]
                                   [--process poisson]

For each rate it plays one arrival stream with the driver `agentload run` uses
(`workload.locust.open_loop.StreamDriver`, gevent sleeps on the real clock) for
--seconds; each session is a greenlet that holds its slot for --hold seconds (so
rate x hold sessions are in flight, as against a server that answers in --hold s)
without sending anything. It prints, per rate, the sessions due, and the start
lateness (actual minus scheduled start) p50 / p99 / max, and the share later than
the run summary's tolerance (`LATENESS_TOLERANCE_S`). Bounded: rates x seconds.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gevent  # noqa: E402
import gevent.pool  # noqa: E402

from workload.locust.open_loop import StreamDriver  # noqa: E402
from workload.plan.arrivals import ArrivalSpec, lateness_summary  # noqa: E402
from workload.plan.load_model import Stream  # noqa: E402
from workload.run.load_summary import LATENESS_TOLERANCE_S  # noqa: E402


def one_rate(rate: float, seconds: float, hold: float, process: str) -> dict:
    spec = ArrivalSpec.model_validate(
        {"process": process, "rate_per_s": rate, "cv": 2.0 if process == "gamma" else None}
    )
    group = gevent.pool.Group()
    sched: list[float] = []
    actual: list[float] = []

    def start(a, done) -> None:
        sched.append(a.t_scheduled)
        actual.append(time.time())  # what play() stamps as t_start

        def session() -> None:
            gevent.sleep(hold)
            done()

        group.spawn(session)

    d = StreamDriver(
        Stream("run", spec, {"a": 1.0}),
        seed=1,
        worker=0,
        n_workers=1,
        t0=time.time() + 0.05,
        start=start,
        drop=lambda a, why: None,
        until_s=seconds,
    )
    d.run()
    group.kill(block=True, timeout=hold + 1)
    late = lateness_summary(sched, actual, LATENESS_TOLERANCE_S)
    return {"rate": rate, **late.to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[10, 100, 1000, 3000])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--hold", type=float, default=2.0)
    ap.add_argument(
        "--process", default="poisson", choices=("poisson", "constant", "gamma")
    )  # gamma: CV 2
    args = ap.parse_args()
    print(
        f"arrival accuracy: {args.process}, {args.seconds:g} s per rate, sessions hold "
        f"{args.hold:g} s (no requests); lateness = actual - scheduled start"
    )
    print(f"{'rate/s':>8} {'due':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'>tol':>7}")
    for rate in args.rates:
        r = one_rate(rate, args.seconds, args.hold, args.process)
        share = r["delayed"] / r["started"] if r["started"] else 0.0
        print(
            f"{rate:>8g} {r['started']:>7} {r['p50_s'] * 1e3:>8.2f} {r['p99_s'] * 1e3:>8.2f} "
            f"{r['max_s'] * 1e3:>8.2f} {share:>7.1%}"
        )


if __name__ == "__main__":
    main()
