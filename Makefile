# kafka-py: `make run` starts a local cluster, `make test` runs the whole suite.
VENV     ?= .venv
PY       := $(VENV)/bin/python
PIP      := $(VENV)/bin/pip
STAMP    := $(VENV)/.installed
PROTOS   := $(wildcard proto/kafkapy/v1/*.proto)
RPC_OUT  := services/common/rpc/kafkapy/v1
RPC_STAMP := $(RPC_OUT)/.generated
PYTEST_ARGS ?=

.PHONY: run test install proto bench bench-recovery lint fmt typecheck clean unit integration \
	image chart-deps chart-test kube-sim bench-scale

install: $(STAMP) $(RPC_STAMP)

$(STAMP): pyproject.toml scripts/install-deps.sh
	./scripts/install-deps.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -e '.[dev,spark]'
	touch $@

# Generated gRPC stubs (with mypy type stubs); never edited by hand.
proto: $(RPC_STAMP)

$(RPC_STAMP): $(PROTOS) $(STAMP)
	rm -rf services/common/rpc/kafkapy
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m grpc_tools.protoc -Iservices/common/rpc=proto \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. $(PROTOS)
	touch services/common/rpc/kafkapy/__init__.py $(RPC_OUT)/__init__.py
	touch $@

# `make run SECURE=1`: internal mutual TLS and ZooKeeper ACLs (cluster up --secure)
run: install
	$(VENV)/bin/kafka-py cluster up $(if $(SECURE),--secure)

# `make test` is three pytest runs and one exit code (non-zero when any fails; PYTEST_ARGS go to
# each). 1: the tiers that start no cluster (chart, unit: CPU-bound, ~4,500 tests) on every core
# with pytest-xdist (TEST_WORKERS: `-n` of pytest-xdist). 2: the integration tier (with spark),
# CLUSTER_WORKERS test modules at a time (pytest-xdist, one module per worker: a module's
# fixtures and cluster stay on one worker; each worker starts its own session cluster): those
# tests mostly wait on their clusters and clients. 3: the fault-injection tiers (e2e: kills,
# partitions, stalls; kube_sim: the zone cut) one test at a time, alone on the machine: they
# measure liveness under faults. tests/conftest.py orders the tiers inside each run.
# The kube-sim tier's images (minutes on a fresh machine: debootstrap, pip, apt) are built in the
# background while the first two runs go; the tier's fixture runs scripts/build-image.sh again,
# which waits for this build (flock) and then finds them cached. PREBUILD_IMAGES=0: no
# background build. The build runs at nice 19: it takes only the CPU the test runs leave idle.
PREBUILD_IMAGES ?= 1
IMAGE_BUILD_LOG ?= image-build.log
TEST_WORKERS ?= logical
CLUSTER_WORKERS ?= 3
NO_CLUSTER_TIERS := tests/chart tests/unit
PARALLEL_CLUSTER_TIERS := tests/integration
SERIAL_CLUSTER_TIERS := tests/e2e tests/kube_sim

# exit code 5 (nothing collected: a PYTEST_ARGS -m/-k selecting tests of other runs only) is a
# pass for one run, not for all three
test: install chart-deps
	@build=; \
	if [ "$(PREBUILD_IMAGES)" = 1 ]; then \
	  nice -n 19 ./scripts/build-image.sh >$(IMAGE_BUILD_LOG) 2>&1 & build=$$!; \
	fi; \
	codes=; summary=; \
	run() { \
	  label=$$1; shift; echo "== $$label: $$*"; start=$$(date +%s); \
	  $(PY) -m pytest -q "$$@" $(PYTEST_ARGS); rc=$$?; \
	  codes="$$codes $$rc"; summary="$$summary; $$label exit $$rc in $$(($$(date +%s) - start))s"; \
	}; \
	run "chart+unit" -n $(TEST_WORKERS) $(NO_CLUSTER_TIERS); \
	run "integration+spark" -n $(CLUSTER_WORKERS) --dist loadfile $(PARALLEL_CLUSTER_TIERS); \
	run "e2e+kube-sim" $(SERIAL_CLUSTER_TIERS); \
	if [ -n "$$build" ] && ! wait $$build; then \
	  echo "background image build failed (the kube-sim tier builds or skips itself): $(IMAGE_BUILD_LOG)" >&2; \
	fi; \
	echo "== make test:$${summary#;}"; \
	ok=1; all5=1; \
	for rc in $$codes; do \
	  [ $$rc = 5 ] || all5=0; [ $$rc = 0 ] || [ $$rc = 5 ] || ok=0; \
	done; \
	[ $$ok = 1 ] && [ $$all5 = 0 ]

unit: install
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests/unit $(PYTEST_ARGS)

integration: install
	@$(PY) -m pytest -q -n $(CLUSTER_WORKERS) --dist loadfile tests/integration $(PYTEST_ARGS); \
	first=$$?; $(PY) -m pytest -q tests/e2e $(PYTEST_ARGS); second=$$?; \
	[ $$first = 0 ] && [ $$second = 0 ]

# The image (podman, or docker when podman is absent): scripts/build-image.sh says which base.
image:
	./scripts/build-image.sh

# deploy/helm's file:// subcharts packed into deploy/helm/charts (never committed)
chart-deps: install
	$(PY) scripts/chart-deps.py

chart-test: chart-deps
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m chart tests/chart $(PYTEST_ARGS)

# the real image, the rendered workloads as podman containers on simulated zones (builds the
# images first; docs/operations.md says what it does and does not prove)
kube-sim: install chart-deps
	$(PY) -m pytest -q -s -m kube_sim tests/kube_sim $(PYTEST_ARGS)

bench: install
	$(PY) -m bench.run
	$(PY) -m bench.recovery
	$(PY) -m bench.spark
	$(PY) -m bench.scale

# many partitions, connections, groups and clients at 1x/4x/16x (BENCH_SCALE=0.25 for a quick run)
bench-scale: install
	$(PY) -m bench.scale

# kill -9 of a storage node holding 1 GB in 100 partitions: time back to serving (no peer broker)
bench-recovery: install
	$(PY) -m bench.recovery

lint: install
	$(VENV)/bin/ruff check services tests bench
	$(VENV)/bin/ruff format --check services tests bench

fmt: install
	$(VENV)/bin/ruff format services tests bench
	$(VENV)/bin/ruff check --fix services tests bench

typecheck: install
	$(VENV)/bin/mypy services

clean:
	rm -rf $(VENV) services/common/rpc/kafkapy .pytest_cache
