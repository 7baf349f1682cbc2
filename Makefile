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
