"""The docs' profile reference (docs/profiles-reference.md) is generated from the models."""

from __future__ import annotations

from tests.profile_builders import ROOT
from workload.plan.reference import REF_BEGIN, REF_END, reference_markdown

PAGE = "docs/profiles-reference.md"


def test_docs_reference_is_generated_from_the_models():
    text = (ROOT / PAGE).read_text()
    got = text[text.index(REF_BEGIN) + len(REF_BEGIN) : text.index(REF_END)].strip()
    assert got == reference_markdown().strip(), (
        f'{PAGE} is stale: python -c "from workload.plan.reference import write_reference; '
        f"write_reference('{PAGE}')\""
    )
