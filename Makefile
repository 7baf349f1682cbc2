# knowledge-store — the project's commands. `make run` sets up and runs; `make test` tests.
VENV    ?= .venv
PY      := $(VENV)/bin/python
KS      := $(VENV)/bin/ks
STORE   ?= .ks/demo
# make eval EVAL=DIR: DIR holds corpus.jsonl, queries.jsonl, qrels.tsv (+ principals.jsonl).
# EVAL_STORE=pg:DIR (or postgresql://…) evaluates on PostgreSQL; EVAL_SEED=STORE_DIR first
# copies an embedded store's embedding cache (and model) in, so the ingest embeds nothing.
EVAL    ?=
EVAL_ARGS ?=
EVAL_SEED ?=
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test lint bench eval clean citus citus-stop

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	$(PY) -m knowledge_store.ingest.embedders.export   # the bundled model as ONNX, once (cached)
	touch $@

run: HOST ?= 127.0.0.1
run: PORT ?= 8000
run: DEMO_TOKENS ?= $(STORE)-tokens.jsonl
run: install
	$(KS) --store $(STORE) ingest README.md docs --format markdown --source project-docs --acl everyone
	@test -f $(DEMO_TOKENS) || $(PY) -c "import json, secrets; print(json.dumps({'token': secrets.token_urlsafe(24), 'identity': 'user:admin', 'admin': True}))" > $(DEMO_TOKENS)
	@echo ""
	@echo "MCP client config, stdio (e.g. claude_desktop_config.json / .mcp.json):"
	@printf '%s\n' '{"mcpServers": {"knowledge-store": {"command": "$(abspath $(KS))", "args": ["--store", "$(abspath $(STORE))", "serve", "--mcp-stdio", "--as", "everyone"]}}}'
	@echo "MCP client config, streamable HTTP (while this server runs):"
	@printf '%s\n' '{"mcpServers": {"knowledge-store": {"type": "http", "url": "http://$(HOST):$(PORT)/mcp"}}}'
	@echo "Admin token (ingest, delete, ACLs over HTTP): see $(DEMO_TOKENS) · docs/serving.md"
	@echo ""
	$(KS) --store $(STORE) serve --host $(HOST) --port $(PORT) --tokens $(DEMO_TOKENS) --anonymous

# three workers (pytest-xdist), each test file on one of them: its module fixtures are built
# once. Three on two cores: a fifth of the suite's wall time is tests waiting on servers and
# subprocesses, and a third worker fills it (4 min 50 s against 5 min 31 s with two)
test: install
	$(PY) -m pytest -q -n 3 --dist loadfile

lint: install
	$(VENV)/bin/ruff check src tests bench dev
	$(VENV)/bin/ruff format --check src tests bench dev
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: install
	$(PY) bench/run_all.py

eval: EVAL_STORE = .ks/eval-$(notdir $(abspath $(EVAL)))
eval: install
	@if [ -z "$(EVAL)" ]; then \
	  echo "make eval needs an evaluation set: make eval EVAL=DIR [EVAL_ARGS='--as P --not-type T']"; \
	  echo "  DIR holds corpus.jsonl (records), queries.jsonl ({qid, text}) and qrels.tsv (query-id, corpus-id, score),"; \
	  echo "  and optionally principals.jsonl (group memberships)."; \
	  echo "  In this repository: make eval EVAL=examples/estate EVAL_ARGS='--as user:sam'"; \
	  echo "  The PostgreSQL 15 docs set of the README's table is distributed separately (see README)."; \
	  exit 2; fi
	@for f in corpus.jsonl queries.jsonl qrels.tsv; do \
	  test -f "$(EVAL)/$$f" || { echo "make eval: $(EVAL)/$$f is missing (EVAL=$(EVAL))"; exit 2; }; done
	@echo "evaluation set: $(abspath $(EVAL)) → store $(EVAL_STORE)"
	@if [ -n "$(EVAL_SEED)" ]; then $(PY) bench/seed_cache.py $(EVAL_SEED) $(EVAL_STORE); fi
	$(KS) --store $(EVAL_STORE) ingest $(EVAL)/corpus.jsonl
	@if [ -f "$(EVAL)/principals.jsonl" ]; then $(KS) --store $(EVAL_STORE) principals load $(EVAL)/principals.jsonl; fi
	$(KS) --store $(EVAL_STORE) eval --queries $(EVAL)/queries.jsonl --qrels $(EVAL)/qrels.tsv $(EVAL_ARGS)

# A local Citus cluster (a coordinator and two workers on 127.0.0.1:9700-9702, data in .ks/citus):
# pgvector and Citus are built once from ../shared/vendor into ~/.cache/knowledge-store/citus
# (needs Debian's postgresql-server-dev-15; docs/scaling.md). `make citus-stop` stops it by PID.
citus: install
	$(PY) dev/citus.py start

citus-stop:
	$(PY) dev/citus.py stop

clean:
	rm -rf .ks .pytest_cache .mypy_cache .ruff_cache
