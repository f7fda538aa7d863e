"""agentload's options on Locust's command line (and in the web UI start form).

`agentload run --X` passes these through; plain `locust -f locustfiles/agents.py`
accepts the same ones. Locust already owns `--profile` (a run-grouping label),
so ours is `--agent-profile` (agentload run accepts `--profile` and maps it).
"""

from __future__ import annotations

from typing import Any


def builtin_profile_names() -> list[str]:
    try:
        from workload.plan.loading import list_profiles

        return [name for name, _ in list_profiles()]
    except Exception:  # noqa: BLE001 - the form still works with a free-text profile
        return []


def add_arguments(parser: Any) -> None:
    """Register agentload options on Locust's (configargparse) parser."""
    # Locust's own parser (not an argument group) knows include_in_web_ui.
    g = parser
    g.add_argument(
        "--agent-profile",
        default="quickstart",
        help="Profile: a built-in name (" + ", ".join(builtin_profile_names()) + ") or a YAML file",
    )
    g.add_argument("--seed", default="", help="Run seed (integer); empty = the profile's seed")
    g.add_argument("--out", default="", help="Run directory; default runs/<run id>")
    g.add_argument(
        "--set",
        dest="agent_set",
        action="append",
        default=[],
        include_in_web_ui=False,
        help="Override a profile field: path.to.field=value (repeatable)",
    )
    g.add_argument(
        "--label",
        dest="agent_label",
        action="append",
        default=[],
        include_in_web_ui=False,
        help="Operator label KEY=VALUE recorded in run.json (repeatable)",
    )
    g.add_argument("--model", default="", help="Model name; default: discovered from /v1/models")
    g.add_argument(
        "--tokenizer",
        default="tiktoken",
        choices=["tiktoken", "server"],
        help="Prompt-size tokenizer: offline tiktoken cl100k_base, or the target's /tokenize",
    )
    g.add_argument(
        "--slo",
        dest="agent_slo",
        action="append",
        default=[],
        include_in_web_ui=False,
        help="SLO override [CLASS.]METRIC=VALUE, e.g. ttft_p95_ms=800 (repeatable)",
    )
    g.add_argument(
        "--sessions-per-user",
        type=int,
        default=0,
        help="Stop each user after this many sessions (0 = until the run time ends)",
    )
    g.add_argument(
        "--scrape-interval",
        type=float,
        default=2.0,
        help="Seconds between /metrics scrapes of the target (0 = off)",
    )
    g.add_argument(
        "--max-error-ratio",
        type=float,
        default=-1.0,
        include_in_web_ui=False,
        help="Exit 1 when errors/requests exceed this (default: the profile's max_error_ratio)",
    )
    g.add_argument(
        "--server-log", default="", include_in_web_ui=False, help="vLLM server log to fingerprint"
    )
    g.add_argument(
        "--run-id",
        dest="agent_run_id",
        default="",
        include_in_web_ui=False,
        help="Run id (set by agentload run)",
    )
    g.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        include_in_web_ui=False,
        help="Environment variable holding the API key (never written anywhere)",
    )
    g.add_argument(
        "--agent-argv",
        default="",
        include_in_web_ui=False,
        help="(internal) the agentload command line",
    )
    g.add_argument(
        "--progress-interval",
        type=float,
        default=5.0,
        include_in_web_ui=False,
        help="Seconds between progress lines in headless runs (0 = off)",
    )
