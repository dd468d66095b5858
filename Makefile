# mars-harness: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The stamps name a hash of pyproject.toml, so editing dependencies reinstalls and nothing else does.
DEPS   := $(shell cksum pyproject.toml | cut -d' ' -f1)
STAMP  := $(VENV)/.installed-$(DEPS)
VSTAMP := $(VENV)/.installed-verl-$(DEPS)
TORCH  := torch==2.13.0
VERL   := verl==0.9.1
# The project's own bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (as on this
# machine) Python never caches it, and every `mars` process the tests start would compile the
# project again (1.7 s a command instead of 0.6 s). Python reads what is here, and skips any file
# whose source has changed since.
COMPILE := $(BIN)/python -m compileall -q -j 0 core dashboard games harness mas mars train_backend >/dev/null

.PHONY: setup test test-fast demo lint bench setup-verl setup-verl-gpu clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first: the CPU wheel on this machine's disk; a bare `torch` requirement would pull CUDA.
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	rm -f $(VENV)/.installed-[0-9]*
	touch $(STAMP)

# The dashboard's browser test drives Debian's Chromium: installed here if missing (as root, or with
# password-less sudo); otherwise a warning, and that one test is skipped.
test: setup-verl
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium for the dashboard browser test"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  ($$SUDO apt-get install -y -qq chromium || ($$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium)) >/dev/null 2>&1 \
	  || echo "warning: chromium could not be installed; the browser test will be skipped"; }
	$(COMPILE)
	$(BIN)/python -m pytest -q -ra --durations=40 -n 2 --no-loadscope-reorder

# The unit tests alone, in about two minutes: the tests not marked `slow` (tests/conftest.py says
# which are: those that build, train or serve the tiny model, need verl or drive a browser).
# Needs neither verl nor Chromium; `make test` runs every test.
test-fast: setup
	$(COMPILE)
	$(BIN)/python -m pytest -q -ra --durations=15 -n 2 -m "not slow"

demo: setup
	$(COMPILE)
	$(BIN)/mars demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Each bench's dry run: its commands and configs through the real parsers, nothing measured (a
# bench measures when run by hand with its options: python bench/NAME.py --help).
bench: setup
	@for script in bench/[!_]*.py; do echo "== $$script"; $(BIN)/python $$script --dry-run || exit 1; done

# verl (the tests train with it on the CPU): the project and its `verl` extra in one resolve with
# the dev tools (separate resolves leave versions Ray rejects), then verl itself without its pins,
# which would replace torch. The check: `pip check` clean but for the pins skipped on purpose,
# torch untouched, verl 0.9.1.
setup-verl: $(VSTAMP)

$(VSTAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e ".[dev,verl]"
	$(BIN)/python -m pip install --quiet --no-deps $(VERL)
	$(BIN)/python .ci/check_env.py $(subst torch==,,$(TORCH))
	rm -f $(VENV)/.installed-*
	touch $(STAMP) $(VSTAMP)

# A CUDA node's stack for `mars train --backend verl` (versions: train_backend/verl/stack.py, which
# the preflight reads too): the project and verl 0.9.1's pinned torch, transformers and vLLM in one
# resolve, verl without its pins, then flash-attn built against that torch. It replaces the CPU
# torch, so the stamps are set: `make setup`/`setup-verl` must not put it back on this venv.
setup-verl-gpu:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e ".[dev,verl]" $$($(BIN)/python -m train_backend.verl.stack pins)
	$(BIN)/python -m pip install --no-deps $(VERL)
	$(BIN)/python -m pip install ninja packaging psutil wheel
	$(BIN)/python -m pip install --no-build-isolation $$($(BIN)/python -m train_backend.verl.stack flash-attn)
	$(BIN)/python -m train_backend.verl.stack check
	rm -f $(VENV)/.installed-*
	touch $(STAMP) $(VSTAMP)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
