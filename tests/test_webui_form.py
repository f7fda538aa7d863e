"""The web UI's start: the URL printed and the form's defaults (workload.locust.webui)."""

from __future__ import annotations

from types import SimpleNamespace

from workload.locust.webui import prefill_form, web_url
from workload.run.spec import OPTIONS


def _opts(**kw):
    d = {o.key: (list(o.default) if o.repeat else o.default) for o in OPTIONS if o.locust_flags}
    d.update(web_host="", web_port=8089, web_base_path="", run_time=None, num_users=None,
             spawn_rate=None, agent_spec="")  # fmt: skip
    d.update(kw)
    return SimpleNamespace(**d)


def test_url_is_loopback_when_the_ui_listens_everywhere():
    assert web_url(_opts()) == "http://127.0.0.1:8089"
    assert web_url(_opts(web_host="*", web_port=9000)) == "http://127.0.0.1:9000"
    assert web_url(_opts(web_host="127.0.0.2", web_base_path="/ui")) == "http://127.0.0.2:8089/ui"


def test_form_defaults_come_from_the_profile_unless_given():
    env = SimpleNamespace(parsed_options=_opts(agent_profile="mixed"), host="")
    prefill_form(env)
    o = env.parsed_options
    assert (o.num_users, o.run_time) == (22, 60) and o.spawn_rate == 22.0
    given = SimpleNamespace(
        parsed_options=_opts(agent_profile="mixed", num_users=3, spawn_rate=1, run_time=20),
        host="",
    )
    prefill_form(given)
    assert (given.parsed_options.num_users, given.parsed_options.run_time) == (3, 20)


def test_a_bad_profile_leaves_the_form_alone():
    env = SimpleNamespace(parsed_options=_opts(agent_profile="no-such-profile"), host="")
    prefill_form(env)
    assert env.parsed_options.run_time is None
