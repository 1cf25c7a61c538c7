# Every target bootstraps its own virtualenv (.venv) on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BUF_VERSION := 1.75.0
BUF := npx --yes @bufbuild/buf@$(BUF_VERSION)
ADDRESS ?= 127.0.0.1:50051

.PHONY: venv serve test conformance lint buf-lint ruff mypy protos bench bench-compare clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## Serve on the embedded default (SQLite ./pai.db, 127.0.0.1:50051).
serve: $(STAMP)
	$(BIN)/pai-grpc migrate
	$(BIN)/pai-grpc serve --address $(ADDRESS)

## The full test suite (SQLite and PostgreSQL).
test: $(STAMP)
	$(BIN)/python -m pytest -q

## Every rule of tests/CONFORMANCE.md with the tests that name it (fails on gaps).
conformance: $(STAMP)
	$(BIN)/python -m tests.conformance

lint: buf-lint ruff mypy

buf-lint:
	$(BUF) lint

ruff: $(STAMP)
	$(BIN)/ruff check pai_grpc storage tests
	$(BIN)/ruff format --check pai_grpc storage tests

mypy: $(STAMP)
	$(BIN)/mypy pai_grpc storage

## Benchmarks, reported as ratios to baselines measured in the same run.
bench: $(STAMP)
	$(BIN)/python -m pai_grpc.bench

## Two versions served in alternating rounds: make bench-compare BASE=main CANDIDATE=. [BACKEND=postgresql]
BASE ?= HEAD
CANDIDATE ?= .
BACKEND ?= sqlite
bench-compare: $(STAMP)
	$(BIN)/python -m pai_grpc.bench.compare $(BASE) $(CANDIDATE) --backend $(BACKEND)

## Regenerate generated/ from protos/ (never edit generated code by hand).
protos: $(STAMP)
	$(BIN)/python -m pai_grpc._codegen

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
