# knowledge-store — the project's commands. `make run` sets up and runs; `make test` tests.
VENV    ?= .venv
PY      := $(VENV)/bin/python
KS      := $(VENV)/bin/ks
STORE   ?= .ks/demo
EVAL    ?= ../shared/eval/postgres-docs
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test lint bench eval clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $@

run: install
	$(KS) --store $(STORE) ingest README.md docs --format markdown --source project-docs --acl everyone
	$(KS) --store $(STORE) stats
	$(KS) --store $(STORE) search "how are permissions applied before ranking" --k 3
	$(KS) --store $(STORE) lexical "pg_stat_activity" --k 3
	$(KS) --store $(STORE) vector "what happens when a process is killed during ingest" --k 3 --explain

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/run_all.py

eval: install
	$(KS) --store .ks/pg15 ingest $(EVAL)/corpus.jsonl
	$(KS) --store .ks/pg15 eval --queries $(EVAL)/queries.jsonl --qrels $(EVAL)/qrels.tsv --not-type codeSample

clean:
	rm -rf .ks .pytest_cache .mypy_cache .ruff_cache
