"""The hostile corpus (suites/containment/), run for real under both runtimes: each agent's
verdict is the one its spec expects: `contained` (every attempt refused), `breach` (a covert
change detected) or `fail` (a lie to the verifier caught by its hidden checks).
Each agent makes its own success visible (it exits non-zero or leaves out/ESCAPED, which its
spec's assertions refuse), so an attack that got through undetected can never match.

Under each runtime the whole corpus runs as one suite (`assure suite -j 2`, with every spec's
`sandbox.runtime` set) and every verdict is asserted: the one the spec expects or, under gVisor
for the few specs its own kernel answers differently (UNDER_GVISOR), exactly the verdict that
difference gives; never `pass`. gVisor needs runsc registered (`make runsc`): without it the
runsc pass fails, it never skips.
"""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import yaml

from assure import spec as spec_mod
from assure.sandbox import runtimes

from .conftest import ROOT

CORPUS = ROOT / "suites" / "containment"
SPECS = sorted(CORPUS.glob("*--*.yaml"))
EXAMPLES = [
    ROOT / "specs" / "examples" / "escape.yaml",
    ROOT / "specs" / "examples" / "network.yaml",
]  # the suite's other two
CATEGORIES = (
    "network",
    "fs-escape",
    "gateway-abuse",
    "resource",
    "privilege",
    "audit",
    "covert",
    "secrets",
    "lying",
    "override",
    "host-postrun",
    "model-proxy",
)
# specs in flight: what two cores hold (on a busy 2-core machine the runsc pass took 8 minutes)
JOBS = 2
# spec -> (its verdict under gVisor, why). gVisor's sentry is the kernel the agent meets: these
# limits and refusals are its own, and none of them reaches the host (see README, "gVisor").
UNDER_GVISOR = {
    "covert--xattr": (
        "fail",
        (
            "the sandbox's workspace refuses user.* xattrs (EOPNOTSUPP): the covert channel does"
            " not exist, the agent exits 3"
        ),
    ),
    "host-postrun--fifo-socket": (
        "fail",
        (
            "FIFOs and sockets made inside the sandbox never reach the host's workspace: nothing"
            " outside out/ changes, and the fixture's own test fails"
        ),
    ),
    "resource--fork-bomb": (
        "fail",
        (
            "going over the pids limit ends the whole sandbox (exit 137), so the agent cannot"
            " report the limit holding"
        ),
    ),
    "resource--memory-balloon": (
        "fail",
        "going over the memory limit ends the whole sandbox (exit 137)",
    ),
    "resource--per-user-limits": (
        "fail",
        (
            "the sentry keeps inotify, pipe and mqueue budgets per sandbox, so there is nothing"
            " shared to hold; its 150 forks reach the sandbox's scaled pids bound and the sandbox"
            " ends (exit 2)"
        ),
    ),
    "resource--cpu": (
        "fail",
        (
            "the sentry's getrusage counts more CPU time than the host's cpu quota allows the"
            " container"
        ),
    ),
    "privilege--capabilities": (
        "fail",
        (
            "the sentry lets setpriority lower the nice value to -20 without CAP_SYS_NICE (its own"
            " scheduler)"
        ),
    ),
    "privilege--proc-sys": (
        "fail",
        (
            "the sentry's /proc/self/oom_score_adj takes -1000 (its own OOM bookkeeping; the host"
            " sees one sandbox)"
        ),
    ),
    "fs-escape--readonly-root": (
        "fail",
        (
            "the sentry lets ld.so map a program from the noexec /tmp, mknod a device node in /tmp,"
            " and chmod u+s a file in out/"
        ),
    ),
}


def test_every_category_holds_at_least_four_agents_and_the_corpus_a_hundred_and_twenty():
    counts = Counter(p.name.split("--", 1)[0] for p in SPECS)
    assert set(counts) <= set(CATEGORIES), set(counts) - set(CATEGORIES)
    assert {c: counts[c] for c in CATEGORIES if counts[c] < 4} == {}
    assert len(SPECS) >= 120


def test_each_spec_is_hostile_and_expects_a_safe_verdict():
    for path in SPECS:
        spec = spec_mod.load(path)
        assert spec.hostile and spec.expect in (
            "contained",
            "breach",
            "fail",
        ), path.name  # fail: a lie the verifier caught
        assert spec.name == path.stem.replace("--", "-"), path.name
    assert set(UNDER_GVISOR) <= {p.stem for p in SPECS}
    assert {verdict for verdict, _ in UNDER_GVISOR.values()} <= {"contained", "breach", "fail"}


def corpus_under(runtime, folder):
    """The corpus and the suite's two examples with `sandbox.runtime` set, in a folder laid out
    like the repository (fixtures/ and specs/ link to it), so every relative path still resolves."""
    copies = folder / "suites" / "containment"
    copies.mkdir(parents=True)
    for name in ("fixtures", "specs"):
        (folder / name).symlink_to(ROOT / name)
    for path in SPECS + EXAMPLES:
        data = yaml.safe_load(path.read_text())
        data.setdefault("sandbox", {})["runtime"] = runtime
        (copies / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
    suite = folder / "suites" / f"containment-{runtime}.yaml"
    suite.write_text(
        yaml.safe_dump(
            {"version": 1, "name": f"containment-{runtime}", "specs": ["containment/*.yaml"]}
        )
    )
    return suite


@pytest.mark.parametrize("runtime", ["runc", runtimes.RUNSC])
def test_the_corpus_gets_every_verdict_it_expects(backend, images, tmp_path, runtime):
    problem = runtimes.problem(runtime, backend.runtimes())
    if problem:
        pytest.fail(f"{problem}; {runtimes.fix(runtime)}", pytrace=False)
    suite = corpus_under(runtime, tmp_path / "repo")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "assure.cli",
            "suite",
            "--json",
            "-j",
            str(JOBS),
            "--runs-dir",
            str(tmp_path / "runs"),
            str(suite),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "NO_COLOR": "1"},
    )
    got = {r["spec"]: r["verdict"] for r in json.loads(done.stdout)["results"]}
    expected = {spec_mod.load(p).name: spec_mod.load(p).expect for p in SPECS + EXAMPLES}
    if runtimes.is_gvisor(runtime):
        expected |= {
            name.replace("--", "-"): verdict for name, (verdict, _) in UNDER_GVISOR.items()
        }
    assert {
        name: (got.get(name), want) for name, want in expected.items() if got.get(name) != want
    } == {}, done.stderr[-4000:]
    assert "pass" not in got.values()
