# meshop: `make demo` runs the main job, `make test` runs the test suite; both set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test lint format docs docs-check bench mutate clean-venv

install:
	bash scripts/install.sh

demo: install
	$(VENV)/bin/meshop demo

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -n 2 -q

lint:
	$(VENV)/bin/ruff check .

format:
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

docs: install
	$(VENV)/bin/mkdocs build --strict

# The built site in a real browser, offline: formulas rendered, no external request, nothing cut
# off. Installs Debian's chromium and chromium-driver (root or sudo) and Selenium, which the default
# install leaves out.
DOCS_CHECK_ARGS ?= --all
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
docs-check: install
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ $(SUDO) apt-get update && \
		  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		  chromium chromium-driver; }
	@$(PY) -c "import selenium" 2>/dev/null || \
		$(PY) -m pip install -q -c $(VENV)/torch-constraints.txt "selenium>=4.11"
	$(PY) scripts/docs_check.py $(DOCS_CHECK_ARGS)

bench: install
	$(PY) -m benchmarks.run_all

# mutation testing (slow, not part of `make test`): `make mutate TARGETS="losses pit"` for some
# modules, `$(PY) scripts/mutate.py --list` for the targets; lists the mutants no test kills
mutate: install
	$(VENV)/bin/pip install -q -c $(VENV)/torch-constraints.txt -e ".[mutation]"
	$(PY) scripts/mutate.py $(TARGETS)
