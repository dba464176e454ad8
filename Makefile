# Two commands set everything up: `make demo` and `make test`. Both create .venv on first use.
# `make test`: the unit tier on every core plus one job through all five services, in minutes.
# `make test-all`: every test, tier by tier (unit and e2e on two workers, then live and slow; tests/README.md); CI runs it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install native demo test test-all lint protos check-protos bench peers-venv clean image

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: native

# The shared-memory arena (C++, Cython), built into the per-user cache ahead of its first use (primus/native);
# a no-op when up to date, a retry after a failed build, a warning without a compiler.
native: $(STAMP)
	$(BIN)/python scripts/build_native.py $(NATIVE_FLAGS)

demo: native
	$(BIN)/primus demo

lint: native
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	cd protos && ../$(BIN)/buf lint
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/python scripts/gen_crd.py --check

PYTEST := $(BIN)/python -m pytest -q
# `make test-all`'s workers for the unit and e2e tiers: each runs one module of service tests at a time (tests/conftest.py
# groups them); the live and slow tiers then run one test at a time (tests/README.md says why).
TEST_WORKERS ?= 2

test: lint
	$(PYTEST) -n auto -m "unit or smoke"

test-all: lint
	$(PYTEST) -n $(TEST_WORKERS) --dist loadgroup -m "unit or e2e"
	$(PYTEST) -m "live or slow"

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

bench: native
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

# benchmarks/peers.py's peers: TensorFlow in a venv of its own (it pins protobuf and numpy its own way), and pandas,
# which Ray Data imports and the project's venv lacks, in a folder the Ray arm puts on its path.
PEERS_VENV ?= .venv-peers
peers-venv: $(STAMP)
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet tensorflow-cpu pyarrow
	$(BIN)/python -m pip install --quiet --no-deps --target $(PEERS_VENV)/ray-site pandas pytz

clean:
	rm -rf $(VENV) runs .primus .pytest_cache .mypy_cache .ruff_cache build primus/_arena*.so

# The image (Dockerfile) with docker or podman, tagged with the package's version, as the manifests name it.
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu makes a CPU-only image.
IMAGE ?= primus:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
TORCH_INDEX_URL ?=
image:
	@engine=$$(command -v docker || command -v podman) || { echo "make image: no container engine here (docker or podman); build the Dockerfile where one runs" >&2; exit 2; }; \
	"$$engine" info >/dev/null 2>&1 || { echo "make image: $$engine cannot reach its engine (is the daemon running?)" >&2; exit 2; }; \
	"$$engine" build --build-arg TORCH_INDEX_URL="$(TORCH_INDEX_URL)" -t "$(IMAGE)" .

