"""`--otlp-endpoint` in a Locust process: start the OpenTelemetry export, and stop it.

Every measuring process exports its own numbers and spans (the local process; in a
distributed run each worker, never the master): spans are born where the requests run, and
OpenTelemetry histograms take values one by one, which only the process that measured them
has (the master receives merged HDR histograms). Each process is its own service instance
(``service.instance.id`` = ``<run id>/<role><worker>``); a backend adds the workers up.
"""

from __future__ import annotations

from typing import Any

from workload import __version__
from workload.errors import SetupError

ROLE_NAME = {"local": "local", "worker": "worker"}


def start_for(rt: Any) -> None:
    """At test start, after `rt.prepare()`: the process's exporter as `rt.otel` (or None)."""
    spec = rt.spec
    if not spec.otlp_endpoint:
        return
    if rt.role == "master":
        print(f"agentload: OpenTelemetry export to {spec.otlp_endpoint}: each worker sends its "
              f"own (service.instance.id {spec.run_id}/worker<N>)", flush=True)  # fmt: skip
        return
    try:
        # a run that exports loads the OpenTelemetry SDK and its OTLP exporter (~0.5 s);
        # deferred: the optional `otel` extra, imported only with --otlp-endpoint
        from workload.measure import otlp
    except ImportError as e:
        raise SetupError(
            f"--otlp-endpoint needs the OpenTelemetry SDK ({e.name} is missing): "
            "pip install 'agentload[otel]'"
        ) from None
    rt.otel = otlp.OtlpExport(settings(rt, otlp.OtlpSettings), gauges(rt, otlp.Gauges), _say)
    if rt.role == "local":
        what = "metrics" + (f" and traces of {_share(spec.otlp_sample)} sessions"
                            if spec.otlp_traces else "")  # fmt: skip
        print(f"agentload: OpenTelemetry export of {what} to {spec.otlp_endpoint} every "
              f"{spec.otlp_interval_s:g}s", flush=True)  # fmt: skip


def settings(rt: Any, cls: Any) -> Any:
    """The process's OtlpSettings (`cls`) from its spec."""
    spec = rt.spec
    who = "local" if rt.role == "local" else f"worker{rt.worker_name}"
    resource: dict[str, Any] = {
        "service.version": __version__,
        "service.instance.id": f"{spec.run_id}/{who}",
        "agentload.run.id": spec.run_id,
        "agentload.role": rt.role,
        "agentload.profile": str(getattr(spec.profile, "name", spec.profile_ref)),
        "agentload.seed": str(spec.seed),
    }
    for key, value in spec.labels.items():
        resource.setdefault(f"agentload.label.{key}", str(value))
    return cls(
        endpoint=spec.otlp_endpoint,
        traces=spec.otlp_traces,
        sample=spec.otlp_sample,
        interval_s=spec.otlp_interval_s,
        seed=spec.seed,
        target=spec.host,
        model=spec.model,
        # vLLM's /v1/models states max_model_len (an extension of its own); OpenAI's does not
        provider="vllm" if spec.max_model_len else "openai",
        resource=resource,
    )


def gauges(rt: Any, cls: Any) -> Any:
    """What the metric reader reads at export time (`cls` Gauges): in flight, arrivals."""
    live = rt.live

    def arrivals() -> tuple[int, int]:
        drivers = getattr(rt.open_loop, "drivers", None) or ()
        return sum(d.due for d in drivers), sum(d.dropped for d in drivers)

    return cls(
        sessions_in_flight=lambda: live.sessions_started - live.sessions_ended,
        requests_in_flight=lambda: live.requests_started - live.requests_ended,
        arrivals=arrivals,
    )


def stop(rt: Any) -> None:
    """The last export (bounded) and the SDK's threads stopped; a second call does nothing."""
    exporter = getattr(rt, "otel", None)
    if exporter is not None:
        rt.otel = None
        exporter.close()


def _say(line: str) -> None:
    print(line, flush=True)


def _share(ratio: float) -> str:
    return "all" if ratio >= 1 else f"{ratio:.0%} of the"
