# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# torch==2.13.0 is pinned first so a CPU machine takes the CPU wheel it already has
# (set TORCH_SPEC to pick another build, e.g. on a CUDA machine).
TORCH_SPEC ?= torch==2.13.0

.PHONY: install run test test-postgres lint format bench bench-quick screenshot

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) -m chatapp.launcher

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory test-postgres

# The backend suite once more against PostgreSQL, when one answers on TEST_POSTGRES_URL.
TEST_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/llmchat_test
test-postgres: install
	@if $(PY) -c "import psycopg,sys; psycopg.connect('$(TEST_POSTGRES_URL)'.rsplit('/',1)[0]+'/postgres', connect_timeout=3).close()" 2>/dev/null; then \
		DATABASE_URL=$(TEST_POSTGRES_URL) $(PY) -m pytest -q tests/chatapp; \
	else echo "PostgreSQL not reachable at $(TEST_POSTGRES_URL): skipping the PostgreSQL pass"; fi

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix . && $(VENV)/bin/ruff format .

bench: install
	$(PY) bench/engine.py

bench-quick: install
	$(PY) bench/engine.py --quick

# Retake the README's screenshot (docs/screenshot.png) from the browser test that shows the chat page.
screenshot: install
	UPDATE_SCREENSHOT=1 $(PY) -m pytest -q tests/ui/test_chat_ui.py -k readme
