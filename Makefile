# alertd: `make run` starts the service on rules/default.yaml, `make test` runs every test.
# Both create (or reuse) .venv and install what they need: `make run` alertd alone, `make test` the test tools too.
# The install compiles the text-log loop in C (src/alertd/sources/textlog/_native.c) where a compiler is found.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RULES  ?= rules/default.yaml
# Two installs into the one venv: `make run` needs only alertd and its runtime dependencies; the tests and the
# linters need the `test` and `dev` extras too (torch, transformers, lightning, mlflow, wandb: minutes to install).
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
INSTALL   := $(PY) -m pip install --quiet --disable-pip-version-check

.PHONY: venv venv-run run test check lint bench demo docs system-deps clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "alertd needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): pyproject.toml src/alertd/__init__.py src/alertd/sources/textlog/_native.c | $(PY)
	$(INSTALL) -e .
	@touch $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml src/alertd/__init__.py src/alertd/sources/textlog/_native.c | $(PY)
	$(INSTALL) -e '.[test,dev]'
	@touch $(DEV_STAMP) $(RUN_STAMP)

venv-run: $(RUN_STAMP)

venv: $(DEV_STAMP)

run: venv-run
	$(VENV)/bin/alertd --rules $(RULES)

# Debian packages the tests run for real: prometheus-alertmanager (the forwarder's tests) and slurm-wlm + munge
# (a single-node Slurm for the slurm source and notifier), chromium (the web pages' browser tests), prometheus
# (scraping alertd, and the prometheus source's tests).
SYSTEM_DEPS := prometheus-alertmanager:prometheus-alertmanager slurmctld:slurm-wlm munged:munge chromium:chromium prometheus:prometheus
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do \
	  bin=$${dep%%:*}; pkg=$${dep##*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$bin >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null; \
	  else echo "install$$missing (apt-get install$$missing) for their tests" >&2; exit 1; fi; fi

test: venv system-deps
	$(PY) -m pytest

lint: venv
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

check: lint test

bench: venv
	@for f in bench/bench_*.py; do $(PY) $$f || exit 1; done

demo: venv-run
	$(PY) examples/demo.py

# The docs site (mkdocs.yml): built as the tests build it, into site/; `$(VENV)/bin/mkdocs serve` while writing.
docs: venv
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist src/*.egg-info
