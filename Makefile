# cdcflow — the two set-up commands are `make demo` and `make test`; both bootstrap .venv from
# uv.lock when needed (idempotent: a no-op when nothing changed).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: all venv preflight-test test lint typecheck unit demo proto lock bench bench-scale soak airflow clean

all: test

venv:
	@bash scripts/bootstrap.sh

## test: lint, type-check and run the whole test suite (what CI runs)
test: venv preflight-test lint typecheck unit

# Debian packages the suite needs (installed as root; named, before anything runs, otherwise)
preflight-test: venv
	$(PY) scripts/preflight.py test

lint: venv
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy

# Two worker processes on this 2-core machine: the suite waits on servers, Airflow's scheduler and Spark much of
# the time (one process kept the CPUs 40% busy). tests/testkit/suite_schedule.py makes the work units and their order.
TEST_WORKERS ?= 2
# The suite's JVMs (Spark sessions, spark-submit's drivers, the Spark Connect server, the topology's executors) live
# seconds to minutes over small tables, and the JIT's second compiler costs more CPU than it saves them. The suite is
# bound by the CPU. With C1 only, tests/changefeed/test_spark_engine.py took 59 and 63 s (user + sys) instead of 97
# and 104 s, in two runs of each of: /usr/bin/time [env SPARK_SUBMIT_OPTS="<these>"] .venv/bin/pytest
#   tests/changefeed/test_spark_engine.py -q -p no:cacheprovider --override-ini addopts= -o timeout=0
# Benchmarks and users' JVMs keep the JVM's defaults.
TEST_JVM_OPTS ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dspark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1
unit: venv
	SPARK_SUBMIT_OPTS="$(TEST_JVM_OPTS)" $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

## demo: start the embedded upstream, replicate two windows through Airflow into Delta, show the result
demo: venv
	@bash scripts/demo.sh

## proto: regenerate cdc_core/proto/*_pb2*.py from the .proto files
proto: venv
	$(PY) scripts/gen_proto.py

## lock: re-resolve uv.lock from pyproject.toml (needs network; keeps locked versions that still fit)
lock: venv
	$(PY) -m uv lock

## airflow: Airflow standalone with the project's dags and plugins on 127.0.0.1:8080 (prints the login)
airflow: venv
	@bash scripts/airflow_standalone.sh

## bench: benchmarks (not part of `make test`)
bench: venv
	$(VENV)/bin/pytest tests/bench -q -p no:cacheprovider --override-ini addopts= -s \
		--ignore=tests/bench/test_scale_bench.py --ignore=tests/bench/test_capture_scale_bench.py

## bench-scale: issue 18's 10 M-row benchmark (hours and ~8 GB at its defaults; CDCFLOW_SCALE_* scale it down) and
## issue 55's capture at the upstream's highest rate through Airflow (30 minutes; CDCFLOW_SCALE_CAPTURE_* scale it)
bench-scale: venv
	$(VENV)/bin/pytest tests/bench/test_scale_bench.py tests/bench/test_capture_scale_bench.py -q -p no:cacheprovider --override-ini addopts= -o timeout=0 -s

## soak: issue 20's soak, 50 windows of the distributed topology under kill -9 and region faults (~1 hour;
## CDCFLOW_SOAK_WINDOWS, _EVERY_S, _KILL_EVERY_S, _ROWS_PER_S, _SEED change it; _CAPTURE=1 runs it against the capture,
## a chaos victim too); figures printed and in soak-figures.json
soak: venv preflight-test
	$(VENV)/bin/pytest tests/soak -q -p no:cacheprovider --override-ini addopts= -o timeout=0 -s --import-mode=importlib

clean:
	-[ ! -e .airflow/pg ] || $(VENV)/bin/python scripts/local_postgres.py remove --dir .airflow/pg
	-[ ! -d .airflow/spark ] || $(VENV)/bin/python scripts/spark_connect.py stop --dir .airflow/spark
	rm -rf .cdcflow .airflow .pytest_cache .mypy_cache .ruff_cache
