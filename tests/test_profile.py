"""Profile models: defaults and the cross-field checks pydantic cannot see field by field."""

from __future__ import annotations

from workload.plan.loading import validate_profile
from workload.plan.profile import Profile


def test_validate_profile_dict():
    p = validate_profile({"classes": {"x": {}}})
    c = p.classes["x"]
    assert c.weight == 1 and c.context.policy == "append" and c.request.endpoint == "chat"
    assert p.compare.ttft_p95_pct == 10 and p.max_error_ratio == 0.05


def test_models_fill_defaults_and_check_cross_fields():
    p = Profile.model_validate(
        {"tools": {"t": {}}, "classes": {"a": {"tools": ["t", "u"], "tool_call_probability": 0.5}}}
    )
    assert p.classes["a"].tools == {"t": 1.0, "u": 1.0}
    assert p.check() == ["classes.a.tools.u: unknown tool (catalog: t)"]
