# snapstore: `make demo` and `make test` work on a fresh machine with python3, make and PyPI.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: all setup native fuzz chromium inspector axe peers demo test test-fast test-quick test-portable lint bench bench-quick torture mutate clean

all: test

# Quiet when all is well: pip's output (and the build backend's notices) goes to a log that is
# printed only when the install fails. `compat` editable mode puts the checkout on sys.path with a
# .pth line; the default (an import hook) costs every CLI start measurable time.
$(STAMP): pyproject.toml
	@echo "setting up $(VENV) (log: $(VENV)/setup.log)"
	@$(PYTHON) -m venv $(VENV)
	@( $(PY) -m pip install --quiet --upgrade pip && \
	   $(PY) -m pip install -e '.[dev,bench,agents,ui,remotes]' --config-settings editable_mode=compat ) \
	   > $(VENV)/setup.log 2>&1 || { cat $(VENV)/setup.log; echo "make: setup failed (log above)"; exit 1; }
	@touch $(STAMP)

# The native thin client (snapstore/service/cclient/, issue 24): built with the system C compiler
# and put in place of pip's `snapstore` script, which stays as `snapstore-py`, its fallback.
# Without a compiler it says so once (and marks it: the Python `snapstore`'s first run does not try
# again, service/firstrun.py) and the Python client serves.
NATIVE := $(VENV)/.native-stamp
$(NATIVE): $(STAMP) snapstore/service/cclient/snapstore.c snapstore/service/cclient/frames.h snapstore/service/native.py snapstore/service/protocol.py
	@$(PY) -m snapstore.service.native --install $(VENV)/bin
	@if [ "$$(head -c 2 $(VENV)/bin/snapstore)" = "#!" ]; then echo "make setup: no native client" > $(VENV)/bin/.snapstore-native-unavailable; fi
	@touch $@

native: $(NATIVE)

setup: $(STAMP) $(NATIVE)

demo: $(STAMP) $(NATIVE)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash examples/demo.sh

# The UI's browser tests drive Debian's chromium (Playwright downloads no browser here): install
# it when it is missing and we are root with apt-get; otherwise say why those tests will skip.
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium for the browser tests (apt-get)"; \
	  ( DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
	    ( apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 ) ) || \
	  echo "make: could not install chromium: the browser tests (tests/test_ui_browser.py) will be skipped"; \
	else \
	  echo "make: no /usr/bin/chromium and not root with apt-get: the browser tests (tests/test_ui_browser.py) will be skipped"; \
	fi

# The official MCP Inspector CLI checks the MCP server's schema (tests/test_mcp_inspector.py):
# installed under .venv when npm is there and can reach its registry; otherwise that test skips.
INSPECTOR := $(VENV)/npm/node_modules/.bin/mcp-inspector
inspector: $(STAMP)
	@if [ -x $(INSPECTOR) ]; then :; \
	elif command -v npm >/dev/null 2>&1; then \
	  echo "installing the MCP Inspector CLI for its test (npm, log: $(VENV)/npm.log)"; \
	  npm install --prefix $(VENV)/npm --no-audit --no-fund --ignore-scripts @modelcontextprotocol/inspector@2.12.0 > $(VENV)/npm.log 2>&1 || \
	  echo "make: could not install the MCP Inspector (log: $(VENV)/npm.log): tests/test_mcp_inspector.py will be skipped"; \
	else \
	  echo "make: no npm: tests/test_mcp_inspector.py will be skipped"; \
	fi

# axe-core checks the UI's pages for accessibility in the browser suite (tests/test_ui_access.py):
# installed under .venv when npm is there and can reach its registry; otherwise that test skips.
AXE := $(VENV)/npm/node_modules/axe-core/axe.min.js
axe: $(STAMP)
	@if [ -f $(AXE) ]; then :; \
	elif command -v npm >/dev/null 2>&1; then \
	  echo "installing axe-core for the UI's accessibility test (npm, log: $(VENV)/npm-axe.log)"; \
	  npm install --prefix $(VENV)/npm --no-audit --no-fund --ignore-scripts axe-core@4.14.1 > $(VENV)/npm-axe.log 2>&1 || \
	  echo "make: could not install axe-core (log: $(VENV)/npm-axe.log): tests/test_ui_access.py's axe test will be skipped"; \
	else \
	  echo "make: no npm: tests/test_ui_access.py's axe test will be skipped"; \
	fi

test: $(STAMP) $(NATIVE) lint chromium inspector axe
	$(PY) -m pytest -q -n 2 --dist loadfile
	SNAPSTORE_PLATFORM=portable $(PY) -m pytest -q -n 2 --dist loadfile $$($(PY) tests/tiers.py portable)

test-fast: $(STAMP) $(NATIVE)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

# The loop to run after each edit (<= 2 min here): every package, without the heavy files
# (tests/tiers.py); make test runs those too.
test-quick: $(STAMP) $(NATIVE)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not heavy"

# The whole suite with the Linux-only facilities masked (SNAPSTORE_PLATFORM=portable, see
# snapstore/platform/ and docs/platforms.md), as macOS or a BSD lacks them: the polling watcher, no
# /proc, no syncfs, no SO_PEERCRED.  The tests of a Linux-only facility skip and name it
# (tests/platform_marks.py).  PORTABLE_WORKERS=1 spares a busy machine's CPU.
PORTABLE_WORKERS ?= 2
test-portable: $(STAMP) $(NATIVE) chromium inspector axe
	SNAPSTORE_PLATFORM=portable $(PY) -m pytest -q -n $(PORTABLE_WORKERS) --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check snapstore tests benchmarks
	$(VENV)/bin/mypy

# restic and borg join the stdlib rows as peers (benchmarks/peers.py): installed with apt-get when
# missing and we are root, as for chromium; otherwise their rows say why they are missing.
peers:
	@for tool in restic:restic borg:borgbackup; do exe=$${tool%%:*}; pkg=$${tool##*:}; \
	  if command -v $$exe >/dev/null 2>&1; then :; \
	  elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $$pkg for the benchmark's peer rows (apt-get)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$pkg >/dev/null 2>&1 || \
	      echo "make: could not install $$pkg: no $$exe rows in the benchmark"; \
	  else echo "make: no $$exe and not root with apt-get: no $$exe rows in the benchmark"; fi; \
	done

bench: $(STAMP) $(NATIVE) peers
	$(PY) -m benchmarks.run --out docs/benchmarks.md
	$(PY) -m benchmarks.replay --repo . --commits 150 --out benchmarks/results/replay-own-history.json --md docs/benchmarks-replay.md
	$(PY) -m benchmarks.million --files 1000000 --md docs/benchmarks-million.md
	$(PY) -m benchmarks.storage_v3 --md docs/benchmarks-storage.md
	$(PY) -m benchmarks.hook_latency --pairs --runs 50 --md docs/benchmarks-hooks.md

bench-quick: $(STAMP) $(NATIVE)
	$(PY) -m benchmarks.run --quick
	$(PY) -m benchmarks.storage_v3 --quick --out /tmp/snapstore-storage-v3-quick.json

# libFuzzer over the native client's side of the protocol (tests/test_native_fuzz.py runs the same
# target's seeded driver under ASan/UBSan in every `make test`).  Needs clang with libFuzzer:
# installed with apt-get when root, as for chromium.  FUZZ_SECONDS=600 make fuzz for a long run.
FUZZ_SECONDS ?= 60
FUZZ_DIR := $(VENV)/fuzz
fuzz: $(STAMP)
	@if ! command -v clang >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing clang with libFuzzer (apt-get)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang libclang-rt-14-dev >/dev/null 2>&1 || true; \
	fi
	@if command -v clang >/dev/null 2>&1; then \
	  mkdir -p $(FUZZ_DIR)/corpus && \
	  clang -g -O1 -fsanitize=fuzzer,address,undefined -DSNAPSTORE_VERSION_TAG='"fuzz"' -DSNAPSTORE_PYTHON_CLIENT='"/bin/false"' \
	    -o $(FUZZ_DIR)/fuzz_frames snapstore/service/cclient/fuzz_frames.c && \
	  $(FUZZ_DIR)/fuzz_frames -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -close_fd_mask=3 $(FUZZ_DIR)/corpus; \
	else \
	  echo "make: no clang with libFuzzer: the seeded driver runs in make test (tests/test_native_fuzz.py)"; \
	fi

# Deliberate breaks the tests must catch (tests/mutations/mutations.toml), each run against a
# copy of the checkout; fails when one survives.  `make test` checks only that the list still
# matches the code (tests/test_mutations.py): the sweep takes minutes.
mutate: $(STAMP) $(NATIVE)
	$(PY) -m tests.mutations.run

torture: $(STAMP)
	$(PY) -m tests.torture

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
