# Every target bootstraps what it needs: a fresh clone runs `make demo` or `make test` directly.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The x402 Foundation's MCP server wrapper needs mcp<2 (it imports mcp.server.fastmcp): their side of
# tests/integration/test_mcp_interop.py runs in this environment, as a subprocess, and so does our
# PaidTools on mcp 1's FastMCP (x402mw from this checkout on PYTHONPATH; sniffio is all it adds).
VENV_MCP1 := .venv-mcp1
STAMP_MCP1 := $(VENV_MCP1)/.installed
export X402MW_MCP1_PYTHON := $(abspath $(VENV_MCP1)/bin/python)
TOOLS := .tools
ANVIL := $(TOOLS)/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil
X402_TS := $(TOOLS)/node_modules/@x402/express/package.json
AXE := $(TOOLS)/node_modules/axe-core/axe.min.js
CHROMIUM := /usr/bin/chromium
export ETH_HASH_BACKEND := pysha3
export X402MW_ANVIL := $(abspath $(ANVIL))
export X402MW_AXE := $(abspath $(AXE))

.PHONY: demo test lint typecheck unit bench bench-check contracts dist clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -c constraints.txt -e ".[flask,starlette,django,platform,dev]"
	# The x402 SDK's sign-in-with-x client formats its messages with signinwithethereum, whose pins
	# exclude the web3 8 and eth-account 0.14 the SDK's evm extra brings; formatting needs neither.
	$(PY) -m pip install -qq --no-deps signinwithethereum==5.0.2 abnf==2.9.1
	@touch $(STAMP)

$(STAMP_MCP1): constraints-mcp1.txt
	@test -x $(VENV_MCP1)/bin/python || $(PYTHON) -m venv $(VENV_MCP1)
	$(VENV_MCP1)/bin/python -m pip install -qq --upgrade pip
	$(VENV_MCP1)/bin/python -m pip install -qq -c constraints-mcp1.txt "x402[evm,mcp]==2.25.0" "mcp<2" sniffio
	@touch $(STAMP_MCP1)

$(ANVIL):
	@mkdir -p $(TOOLS)
	cd $(TOOLS) && npm install --silent --no-audit --no-fund --prefix . @foundry-rs/anvil@1.7.1
	@test -x $(ANVIL) || (echo "anvil did not install at $(ANVIL)" && exit 1)

# The x402 Foundation's TypeScript SDK, for the interop tests of an agent and a seller written with it.
$(X402_TS): $(ANVIL)
	cd $(TOOLS) && npm install --silent --no-audit --no-fund --prefix . @x402/fetch@2.27.0 @x402/evm@2.27.0 @x402/express@2.27.0 express@5.3.0 viem@2.57.20
	@test -f $(X402_TS) || (echo "the x402 TypeScript SDK did not install at $(X402_TS)" && exit 1)

# axe-core, which the browser tests inject into the checkout pages to check their accessibility.
$(AXE): $(ANVIL)
	cd $(TOOLS) && npm install --silent --no-audit --no-fund --prefix . axe-core@4.14.1
	@test -f $(AXE) || (echo "axe-core did not install at $(AXE)" && exit 1)

# The browser tests drive Debian's Chromium (playwright cannot download its own browser here).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
	@test -x $(CHROMIUM) || (echo "chromium did not install at $(CHROMIUM)" && exit 1)

demo: $(STAMP)
	$(VENV)/bin/x402mw demo

lint: $(STAMP)
	$(VENV)/bin/ruff check x402mw tests bench examples
	$(VENV)/bin/ruff format --check x402mw tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir build/site

# PostgreSQL at X402MW_TEST_POSTGRES_URL, or a throwaway cluster from the local binaries (tests/pg_cluster.py).
# The soak (tests/reliability/test_soak.py, and the relayer pool's load, test_pool.py) runs alone
# afterwards: each starts four platform processes of its own and measures them under faults, which
# the rest of the suite running beside it would skew.
# --dist worksteal: a worker that runs out of tests takes pending ones from the other, so that the long
# tests (a docs page, schemathesis) queued on one worker do not leave the other idle at the end.
test: $(STAMP) $(STAMP_MCP1) $(ANVIL) $(X402_TS) $(AXE) $(CHROMIUM) lint
	$(PY) -m tests.pg_cluster -- $(PY) -m pytest -q -n 2 --dist worksteal --timeout 300 --durations 25 -m "not soak"
	$(PY) -m tests.pg_cluster -- $(PY) -m pytest -q -s --timeout 900 -m soak

bench: $(STAMP) $(ANVIL)
	$(PY) -m bench

# The fast benchmarks at a small size, each same-run ratio held to its bound in bench/floors.toml
# (about 6 minutes); CI runs it after the tests.
bench-check: $(STAMP) $(ANVIL)
	$(PY) -m tests.pg_cluster -- $(PY) -m bench.check

# A wheel in dist/, for a machine without the checkout (no package index serves x402mw):
# pip install "dist/x402mw-0.1.0-py3-none-any.whl[platform]". tests/integration/test_dist.py builds
# it the same way and serves the platform from it.
dist: $(STAMP)
	rm -rf dist build/lib build/bdist.*
	$(PY) -m pip wheel -q --no-deps -w dist .
	@ls dist/*.whl

contracts:
	cd contracts && ./build.sh

clean:
	rm -rf $(VENV) $(VENV_MCP1) $(TOOLS) build dist *.egg-info
