# assure: `make demo` runs the demo suite (suites/demo.yaml) in real sandboxes; `make test` runs every test.
# Both set up what they need: a virtualenv, the Python packages, the images (and, for the
# tests, gVisor's runsc registered with the engine).
PYTHON ?= python3
# The checkout's own specs are signed with its published example key (specs/ratifiers.yaml).
export ASSURE_RATIFIERS ?= $(CURDIR)/specs/ratifiers.yaml
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install images fixtures test unit check typecheck demo benign bench gc clean runsc chromium

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# INSTALL_SPECS: examples whose agent.install image is built too (Claude Code: a one-time
# download of 157 MiB and about a minute; mini-swe-agent: 54 MB of wheels, +170 MB of image,
# about 40 s; cached by content after that).
INSTALL_SPECS ?= specs/examples/claude-code.yaml specs/examples/mini-swe-agent.yaml

# The base image is bootstrapped with debootstrap when no registry answers; as root on a
# Debian-like host we install that one tool if it is missing.
images: install
	@if ! command -v debootstrap >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing debootstrap (needed to build the base image without a registry)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; \
	fi
	$(BIN)/assure images build $(INSTALL_SPECS)

# Fixtures too big to commit, generated deterministically (benign--large-repo's 5,318 files).
fixtures:
	$(PYTHON) fixtures/workspaces/make_monorepo.py

# The benign corpus (suites/benign/): every spec must pass with no finding above info.
# benign--http-allowlisted needs its test server: fixtures/upstreams/benign_upstream.py starts it.
benign: images fixtures
	$(BIN)/python fixtures/upstreams/benign_upstream.py -- $(BIN)/assure suite suites/benign.yaml

# The unit tests (the driver's state machine on the in-memory backend included) run with
# DOCKER_HOST pointing nowhere: they prove they need no engine. The integration tests then run
# on the real one; the gVisor tests need runsc registered with it (as root).
NO_DOCKER := DOCKER_HOST=unix:///nonexistent/docker.sock
# Most of an integration test's time is waiting on containers, so three workers (pytest-xdist)
# overlap those waits on two cores; tests/integration/conftest.py says which tests share a worker.
XDIST := -n 3 --dist loadgroup --no-loadscope-reorder

test: images runsc chromium fixtures
	$(NO_DOCKER) $(BIN)/python -m pytest -q tests/unit
	$(BIN)/python -m pytest -q --durations=30 $(XDIST) tests/integration

# The habits (also .pre-commit-config.yaml and .ci/run): ruff's lint and format, the import
# rules of ARCHITECTURE.md (import-linter, its contracts in pyproject.toml) and mypy.
check: install typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# mypy (strict on core/, records/ and verify/, checked elsewhere; config in pyproject.toml).
typecheck: install
	$(BIN)/mypy

unit: install fixtures
	$(NO_DOCKER) $(BIN)/python -m pytest -q tests/unit

demo: images
	$(BIN)/assure suite suites/demo.yaml

# The scorecard (bench/scorecard.py, last so it is what stays on screen): the containment, benign
# and conformance suites, the throughput suite at -j1/-j2/-j4 and the benchmarks, in one table and
# .assure/bench/scorecard.json, then compared with the last scorecard there of a commit on main
# (`assure bench compare OLD NEW` judges any two). The gate's and the CLI's fixed costs are parts
# of it, and so is the boot CPU (bench/boot_cpu_bench.py); the workspace, seccomp, model-call
# and Ray cluster benchmarks print their own lines first
# (not in the scorecard: one failing does not stop it, make says "Error ignored"). BENCH_ARGS: e.g.
# --only e2e gateway.
bench: images fixtures
	@if ! command -v sqldiff >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3-tools >/dev/null; \
	fi
	-$(BIN)/python bench/workspace_fs_bench.py
	-$(BIN)/python bench/checks_bench.py
	-$(BIN)/python bench/seccomp_bench.py
	-$(BIN)/python bench/model_latency.py
	-$(BIN)/python bench/cluster_bench.py
	$(BIN)/python bench/scorecard.py $(BENCH_ARGS)

# Headless Chromium renders the HTML reports in tests/integration/test_html_report.py (as root
# on a Debian-like host we install Debian's package if it is missing).
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium (renders the HTML reports in the integration tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	fi

# Register gVisor's runsc with the running dockerd (as root; installs Debian's package if missing).
runsc:
	bash .ci/register-runsc

gc: install
	$(BIN)/assure gc

clean:
	rm -rf $(VENV) .assure .pytest_cache
