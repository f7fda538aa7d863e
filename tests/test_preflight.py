"""Before any traffic: what the target must offer for the run asked for."""

from __future__ import annotations

import pytest

from tests.e2e.cli import CHAT_PROFILE
from tests.fake_vllm import FakeVLLM, js
from workload.cli.main import resolve_run
from workload.errors import UsageError
from workload.orchestrate.preflight import preflight

MODELS = {"/v1/models": js({"data": [{"id": "m", "max_model_len": 32768}]})}


def test_a_server_tokenizer_the_target_lacks_is_refused_before_the_run():
    with FakeVLLM(MODELS) as srv:  # GET routes only: POST /tokenize is not served
        spec = resolve_run(["--host", srv.url, "--profile", CHAT_PROFILE, "--tokenizer", "server"])
        with pytest.raises(UsageError, match="--tokenizer server: the server's /tokenize") as e:
            preflight(spec)
    assert "\n" not in str(e.value) and "--tokenizer tiktoken" in str(e.value)


def test_the_offline_tokenizer_needs_nothing_from_the_target():
    with FakeVLLM(MODELS) as srv:
        preflight(resolve_run(["--host", srv.url, "--profile", CHAT_PROFILE, "--duration", "5s"]))
