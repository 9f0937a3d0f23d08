# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install bytecode demo test test-deps lint bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -qq -e '.[test]'
	touch $@

install: $(STAMP) bytecode

# The checkout's byte-code, as pip writes it for a wheel: an editable install has none, and
# where PYTHONDONTWRITEBYTECODE is set every command would compile each module it imports
# (30 ms of a cold `sharecrawl search`). Incremental: only changed sources are compiled.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -x '^\./(\.venv|demo-lan|crawl|build)/' . >/dev/null

demo: install
	$(BIN)/sharecrawl demo --workdir demo-lan

# Samba (smbd for the test servers, its VFS modules for the read-only audit, smbclient as
# the benchmark's reference) and Java (for mrjob's Spark runner) come from Debian's packages
# when we are root; without them the tests that need them skip with a reason.
test-deps: install
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    { ! command -v smbd >/dev/null || ! command -v smbclient >/dev/null || \
	      ! ls /usr/lib/*/samba/vfs/full_audit.so >/dev/null 2>&1 || ! command -v java >/dev/null; }; then \
	  echo "installing samba, smbclient, samba-vfs-modules and Java from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends samba smbclient samba-vfs-modules default-jre-headless >/dev/null; \
	fi
	@# headless Chromium and its WebDriver for the search page's browser tests
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then \
	  echo "installing chromium and chromium-driver from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends chromium chromium-driver >/dev/null; \
	fi
	@# XFS's mkfs, for the index update on a file system that clones files (a loop mount)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v mkfs.xfs >/dev/null; then \
	  echo "installing xfsprogs from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends xfsprogs >/dev/null; \
	fi
	@# nmap, the reference of the address sweep's benchmark (bench/discover.py)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v nmap >/dev/null; then \
	  echo "installing nmap from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends nmap >/dev/null; \
	fi

	@# promtool (Debian's prometheus), which checks the metrics the rounds and serve write
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v promtool >/dev/null; then \
	  echo "installing prometheus (for promtool) from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; \
	fi

test: test-deps
	@echo "dependencies the tests run with:"; $(BIN)/python -m pip list --format=freeze 2>/dev/null | \
	  grep -iE '^(mrjob|luigi|pyarrow|duckdb|mutagen|smbprotocol|pyspnego|impacket|rich|guessit|pystemmer|starlette|uvicorn|jinja2|numpy|prometheus.client|pyspark|selenium|hypothesis|pytest|pytest.xdist)=='
	@# four workers, a test file each at a time: most of a test's time is its children's
	@# (the console script, smbd, chromium), so two cores keep four files going
	$(BIN)/python -m pytest -n 4 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) demo-lan .pytest_cache
