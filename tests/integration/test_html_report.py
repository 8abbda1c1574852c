"""`assure report html` on real runs: a suite of the benign and the escape examples, run in
real sandboxes, then each page opened in headless Chromium (Debian's `chromium`; `make test`
installs it), which must render what a reviewer needs from the page alone, offline."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import EXAMPLES
from .test_cli import assure, write_suite

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Every way Chromium might reach out is off: no proxy lookup, no background services, no
# component updates; the page's CSP forbids any fetch anyway.
OFFLINE = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-proxy-server",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--dns-prefetch-disable",
    "--window-size=1280,2000",
]


def chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM, "chromium is required (make test installs it: apt-get install chromium)"
    return subprocess.run(
        [CHROMIUM, *OFFLINE, f"--user-data-dir={profile}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )


def rendered(page: Path, profile: Path) -> str:
    """The DOM Chromium built from the page, as text (tags stripped, entities decoded)."""
    done = chromium(page, profile, "--dump-dom")
    assert done.returncode == 0 and "<body>" in done.stdout, done.stderr[-2000:]
    return done.stdout


def text_of(dom: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", dom))


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory, images) -> tuple[Path, dict]:
    """The benign and the escape examples as one suite, run once for this module's tests."""
    tmp = tmp_path_factory.mktemp("htmlsuite")
    suite = write_suite(tmp, [EXAMPLES / "benign.yaml", EXAMPLES / "escape.yaml"])
    done = assure("suite", "--json", str(suite), cwd=tmp, check_code=0)
    return tmp, json.loads(done.stdout)


def test_a_run_page_renders_the_verdict_the_diff_and_the_denied_call(suite_run, tmp_path) -> None:
    cwd, result = suite_run
    escape = next(r for r in result["results"] if r["spec"] == "escape")
    page = tmp_path / "run.html"
    assure("report", "html", escape["run_id"], "-o", str(page), cwd=cwd, check_code=0)
    source = page.read_text()
    assert "<script" not in source and 'http-equiv="Content-Security-Policy"' in source

    dom = rendered(page, tmp_path / "profile")
    text = text_of(dom)
    assert "BREACH" in text and "the spec expects breach: as expected" in text
    assert '+import os; os.system("id")' in text  # src/backdoor.py's added line, in its diff
    assert "0644" in text and "0777" in text  # README.md's old and new modes
    assert (
        "Denied and rejected calls (3)" in text
        and "protected_path" in text
        and "tests/test_calc.py" in text
        and "'/etc/passwd' is absolute" in text
    )
    assert "all good, nothing to see" in text and "claim (narrative, not evidence)" in text
    assert "writable (direct edits allowed)" in text and "out/**" in text and "tests/**" in text

    shot = tmp_path / "run.png"
    assert chromium(page, tmp_path / "profile", f"--screenshot={shot}").returncode == 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_suite_page_renders_its_charts_and_rows(suite_run, tmp_path) -> None:
    cwd, result = suite_run
    page = tmp_path / "suite.html"
    assure("report", "html", result["suite_run_id"], "-o", str(page), cwd=cwd, check_code=0)
    benign = next(r for r in result["results"] if r["spec"] == "benign")
    attribution = tmp_path / "benign.html"
    assure(
        "report",
        "html",
        str(cwd / ".assure" / "runs" / benign["run_id"]),
        "-o",
        str(attribution),
        cwd=cwd,
        check_code=0,
    )

    dom = rendered(page, tmp_path / "profile")
    assert (
        dom.count("<svg") == 2 and dom.count("<rect") == 6 + 2
    )  # a bar per verdict, a bar per spec
    text = text_of(dom)
    assert (
        "AS EXPECTED" in text
        and "2 of 2 specs as expected" in text
        and "benign" in text
        and "escape" in text
    )

    benign_dom = rendered(attribution, tmp_path / "profile")
    link = re.search(
        r'href="#(journal-[0-9a-f]{16})">journal line \d+</a> \(fs\.write at ', benign_dom
    )
    assert (
        link and f'id="{link.group(1)}"' in benign_dom
    )  # src/calc.py's attribution lands on its journal line

    shot = tmp_path / "suite.png"
    assert chromium(page, tmp_path / "profile", f"--screenshot={shot}").returncode == 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
