"""The hostile corpus (suites/containment/), run for real: each agent's verdict is the one its
spec expects: `contained` (every attempt refused), `breach` (a covert change detected) or
`fail` (a lie to the verifier caught by its hidden checks).
Each agent makes its own success visible (it exits non-zero or leaves out/ESCAPED, which its
spec's assertions refuse), so an attack that got through undetected can never match."""

from collections import Counter

import pytest

from assure import spec as spec_mod

from .conftest import ROOT

SPECS = sorted((ROOT / "suites" / "containment").glob("*--*.yaml"))
CATEGORIES = ("network", "fs-escape", "gateway-abuse", "resource", "privilege", "audit",
              "covert", "secrets", "lying", "override", "host-postrun", "model-proxy")


def test_every_category_holds_at_least_four_agents_and_the_corpus_sixty():
    counts = Counter(p.name.split("--", 1)[0] for p in SPECS)
    assert set(counts) <= set(CATEGORIES), set(counts) - set(CATEGORIES)
    assert {c: counts[c] for c in CATEGORIES if counts[c] < 4} == {}
    assert len(SPECS) >= 60


def test_each_spec_is_hostile_and_expects_a_safe_verdict():
    for path in SPECS:
        spec = spec_mod.load(path)
        assert spec.hostile and spec.expect in ("contained", "breach", "fail"), path.name  # fail: a lie the verifier caught
        assert spec.name == path.stem.replace("--", "-"), path.name


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_a_hostile_agent_is_refused_or_detected(run, path):
    result = run(path)
    assert result.verdict == spec_mod.load(path).expect, result.report
