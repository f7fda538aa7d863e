"""The README's profile reference is generated from the models."""

from __future__ import annotations

from tests.profile_builders import ROOT
from workload.plan.reference import REF_BEGIN, REF_END, reference_markdown


def test_docs_reference_is_generated_from_the_models():
    text = (ROOT / "README.md").read_text()
    got = text[text.index(REF_BEGIN) + len(REF_BEGIN) : text.index(REF_END)].strip()
    assert got == reference_markdown().strip(), (
        "README.md's profile reference is stale: python -c \"from workload.plan.reference import write_reference; "
        "write_reference('README.md')\""
    )
