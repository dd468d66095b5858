# mars-harness: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The stamp names a hash of pyproject.toml, so editing dependencies reinstalls and nothing else does.
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
TORCH  := torch==2.13.0

.PHONY: setup test demo lint bench setup-verl clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the CPU wheel on this machine's disk; a bare `torch` requirement would pull CUDA.
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# The dashboard's browser test drives Debian's Chromium: installed here if missing (as root, or with
# password-less sudo); otherwise a warning, and that one test is skipped.
test: setup
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium for the dashboard browser test"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  ($$SUDO apt-get install -y -qq chromium || ($$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium)) >/dev/null 2>&1 \
	  || echo "warning: chromium could not be installed; the browser test will be skipped"; }
	$(BIN)/python -m pytest -q -ra

demo: setup
	$(BIN)/mars demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	@for script in bench/[!_]*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

# verl for clusters: installed without its dependency pins, which would replace torch (facts.md);
# the `verl` extra lists what it needs instead. The last line checks that torch was left alone.
setup-verl: setup
	$(BIN)/python -m pip install --quiet -e ".[verl]"
	$(BIN)/python -m pip install --quiet --no-deps verl==0.9.1
	$(BIN)/python -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('$(subst torch==,,$(TORCH))') else 'verl setup replaced torch ' + v)"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
