# alertd: `make run` starts the service on rules/default.yaml, `make test` runs every test.
# Both create (or reuse) .venv and install what they need.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
RULES  ?= rules/default.yaml

.PHONY: venv run test check lint bench demo system-deps clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "alertd needs Python 3.11 or newer")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
	@touch $(STAMP)

venv: $(STAMP)

run: venv
	$(VENV)/bin/alertd --rules $(RULES)

# Debian packages the tests run for real: prometheus-alertmanager (the forwarder's tests) and slurm-wlm + munge
# (a single-node Slurm for the slurm source and notifier).
SYSTEM_DEPS := prometheus-alertmanager:prometheus-alertmanager slurmctld:slurm-wlm munged:munge
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

demo: venv
	$(PY) examples/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist src/*.egg-info
