# One command per task; CI runs `make test` through .ci/run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv run test test-fast test-crash check bench clean proto

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## run: set up the environment, then run the producer and consumer examples on a local data dir
run: $(STAMP)
	$(PY) examples/producer_example.py --persist-dir ./data
	$(PY) examples/consumer_example.py --persist-dir ./data

## test: set up the environment, then run the whole test suite
test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-crash: $(STAMP)
	$(PY) -m pytest -q tests/crash

check: $(STAMP)
	$(VENV)/bin/ruff format --check lkstream tests benchmarks examples
	$(VENV)/bin/ruff check lkstream tests benchmarks examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(PY) benchmarks/bench_producer.py
	$(PY) benchmarks/bench_consumer.py

## proto: regenerate the Python gRPC stubs in lkstream/server/_proto from proto/messaging.proto
PROTO_OUT := lkstream/server/_proto
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) \
		--grpc_python_out=$(PROTO_OUT) proto/messaging.proto
	# protoc writes a top-level import; make it a package import.
	sed -i 's/^import messaging_pb2 as messaging__pb2$$/from lkstream.server._proto import messaging_pb2 as messaging__pb2/' \
		$(PROTO_OUT)/messaging_pb2_grpc.py

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
