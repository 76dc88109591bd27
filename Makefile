# One command per task; CI runs `make test` through .ci/run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# One stamp per set of extras: each target installs what it needs, once (until pyproject.toml or the
# C extension's source changes: `pip install -e .` compiles lkstream/format/_records.c).
BUILD_INPUTS := pyproject.toml $(wildcard lkstream/format/*.c lkstream/format/*.h lkstream/storage/*.c)
STAMP_RUN := $(VENV)/.installed-run
STAMP_SPARK := $(VENV)/.installed-spark
STAMP := $(VENV)/.installed
# pip shows two notes of setuptools as warning boxes that a newcomer reads as a failed install: the
# ext-modules table of pyproject.toml is "experimental", and how an editable install finds the package.
# Only these two are silenced (matched by their first words); errors and every other warning still show.
QUIET_NOTES := PYTHONWARNINGS='ignore:Editable installation:UserWarning,ignore:`[tool.setuptools.ext-modules]`:UserWarning'
PIP_INSTALL := $(QUIET_NOTES) $(PY) -m pip install --quiet

.PHONY: venv run examples spark-example test-spark test system-deps test-fast test-crash check bench bench-quick bench-peers-quick bench-single clean proto

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

## the runtime dependencies only (the daemon, the CLI, the embedded examples): `pip install -e .`
$(STAMP_RUN): $(BUILD_INPUTS) | $(PY)
	$(PIP_INSTALL) -e .
	touch $@

## the runtime plus the `spark` extra (pyspark, pyarrow): the Spark example
$(STAMP_SPARK): $(BUILD_INPUTS) | $(PY)
	$(PIP_INSTALL) -e '.[spark]'
	touch $@ $(STAMP_RUN)

## everything the tests and `make check` use (`dev` and `spark` extras); what `make venv` makes
$(STAMP): $(BUILD_INPUTS) | $(PY)
	$(PIP_INSTALL) -e '.[dev,spark]'
	touch $@ $(STAMP_SPARK) $(STAMP_RUN)

venv: $(STAMP)

## run: set up the environment, then run the daemon on conf/local.yml (gRPC 127.0.0.1:9090, HTTP 127.0.0.1:8080,
## Kafka 127.0.0.1:9092, data in ./data) until Ctrl-C / SIGTERM. scripts/foreground.py gives the daemon the
## terminal, so that Ctrl-C stops it gracefully and make exits 0 (make itself would die of the SIGINT: 130).
run: $(STAMP_RUN)
	$(PY) scripts/foreground.py $(PY) -m lkstream.grpc_server --config conf/local.yml

## examples: the embedded producer and consumer examples on their own data dir, ./example-data (no daemon,
## so they never collide with `make run`'s ./data)
EXAMPLE_DATA := ./example-data
examples: $(STAMP_RUN)
	$(PY) examples/producer_example.py --persist-dir $(EXAMPLE_DATA)
	$(PY) examples/consumer_example.py --persist-dir $(EXAMPLE_DATA)

## test: set up the environment (and promtool, for the alert-rule checks), then run the whole test suite
## three workers for everything but the tests that need the machine to themselves (marked `serial`),
## which run afterwards on their own; either part collecting nothing fails (pytest's exit 5). Three on
## CI's two cores: the tests mostly wait (daemons, CLI processes and JVMs starting), and two workers
## kept the cores half idle (12:49 against 10:55 for the whole target, measured). Files go to the
## workers longest first (tests/conftest.py), so no reordering by test count.
XDIST = -n 3 --dist loadfile --no-loadscope-reorder
test: $(STAMP) system-deps
	$(PY) -m pytest -q $(XDIST) -m "not serial"
	$(PY) -m pytest -q -m serial

## system-deps: Debian packages the tests use (promtool); a no-op when present
system-deps:
	bash scripts/install-system-deps.sh

## spark-example: the PySpark pipeline (ticks -> 1-minute OHLC bars -> Parquet + market.bars) over its own
## daemon on ./example-data; `make spark-example ARGS="--bootstrap 127.0.0.1:9090"` uses a running one instead
spark-example: $(STAMP_SPARK)
	$(PY) examples/spark_pipeline.py $(ARGS)

test-spark: $(STAMP)
	$(PY) -m pytest -q tests/spark

## test-fast: what to run while working (1:32 measured): the unit, property, Kafka-wire and crash
## tests without the slow ones; `make test` adds the end-to-end paths (daemon, CLI, security, Spark,
## the frameworks, the docs as pasted) and is what CI runs
test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not slow and not serial" tests/unit tests/property tests/kafka_wire tests/crash

test-crash: $(STAMP)
	$(PY) -m pytest -q tests/crash

check: $(STAMP)
	$(VENV)/bin/ruff format --check lkstream tests benchmarks examples
	$(VENV)/bin/ruff check lkstream tests benchmarks examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

## bench: LKSTREAM side by side with Tansu, NATS JetStream and Redis Streams and the machine's limits, in one run
## (about 15 min). Servers: scripts/install-bench-deps.sh; clients: the `bench` extra. The new result takes the place
## of the previous one in docs/benchmarks.md's tables and plots; the run it replaces is listed, to `git rm`.
bench: $(STAMP)
	bash scripts/install-bench-deps.sh
	$(PIP_INSTALL) -e '.[dev,bench]'
	out=benchmarks/results/peers-$$(date -u +%Y%m%dT%H%M%SZ).json; \
	$(PY) -m benchmarks.suite.run --out $$out && $(PY) -m benchmarks.suite.plots $$out && \
	$(PY) -m benchmarks.report --from $$out

## bench-quick: the regression pass before and after a change (embedded produce, Producer.send, ack latency,
## Consumer.consume, peak RSS; the daemon's produce, consume and latency; about 8 minutes a side for 3 passes).
## benchmarks/tools/quick.py --spark adds the Spark rows, --no-daemon leaves the daemon out.
## AGAINST=<rev> picks the "before" (default: where this branch left main); AGAINST= measures the tree alone.
AGAINST ?= $(shell git merge-base main HEAD 2>/dev/null)
bench-quick: $(STAMP)
	$(PY) -m benchmarks.tools.quick $(if $(AGAINST),--against $(AGAINST))

## bench-peers-quick: a one-run smoke pass of the peer suite (about 3 minutes; its result is not cited)
bench-peers-quick: $(STAMP)
	bash scripts/install-bench-deps.sh
	$(PIP_INSTALL) -e '.[dev,bench]'
	$(PY) -m benchmarks.suite.run --quick

## bench-single: the embedded broker alone at full size, one script after the other (never concurrently: 2 cores):
## produce with the disk's reference writers, consume and random reads on a 10 GB log, restart after SIGKILL and
## the crash soak (about 15 minutes; needs about 15 GB free)
bench-single: $(STAMP)
	$(PY) -m benchmarks.e2e.bench_producer > /dev/null
	$(PY) -m benchmarks.e2e.bench_consumer > /dev/null
	$(PY) -m benchmarks.e2e.bench_recovery > /dev/null

## proto: regenerate the Python gRPC stubs in lkstream/wire/_proto from proto/messaging.proto
PROTO_OUT := lkstream/wire/_proto
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) \
		--grpc_python_out=$(PROTO_OUT) proto/messaging.proto
	# protoc writes a top-level import; make it a package import.
	sed -i 's/^import messaging_pb2 as messaging__pb2$$/from lkstream.wire._proto import messaging_pb2 as messaging__pb2/' \
		$(PROTO_OUT)/messaging_pb2_grpc.py

clean:
	rm -rf $(VENV) data example-data spark-bars spark-bars.checkpoint ticks.txt member-*.log .pytest_cache .mypy_cache .ruff_cache
