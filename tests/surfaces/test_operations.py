"""The operation table: every surface exposes every operation it names, with the same limits and words.

For each operation of :data:`OPERATIONS` the test reads what each surface
publishes — the OpenAPI document, the GraphQL schema, the MCP tool list, the
typer commands — and compares the bounds with the request model's. Then it
sends the same bad request to every surface and checks that each refuses it
with the store's own error, the field named in that surface's spelling.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from graphql import GraphQLList, GraphQLNonNull, GraphQLScalarType
from typer.core import TyperArgument, TyperOption
from typer.testing import CliRunner

import knowledge_store
from knowledge_store.errors import KnowledgeStoreError
from knowledge_store.model import Identity
from knowledge_store.requests import FilterSpec
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces import cli_options
from knowledge_store.surfaces.auth import Caller
from knowledge_store.surfaces.cli import app as cli_app
from knowledge_store.surfaces.graphql import schema as graphql_schema
from knowledge_store.surfaces.graphql import spelling as graphql_spelling
from knowledge_store.surfaces.operations import OPERATIONS, Operation
from knowledge_store.surfaces.spelling import camel, respell
from knowledge_store.surfaces.tools import ADMIN_TOOLS, ALL_TOOLS, call_tool
from tests.surfaces.serve_estate import BOB, ROOT, call

BOUNDS = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems")


def _resolve(node: Any, spec: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            return _resolve(spec["components"]["schemas"][ref.rsplit("/", 1)[-1]], spec)
        return {k: _resolve(v, spec) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, spec) for v in node]
    return node


def _limits(schema: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """Every bound and closed choice of a schema, by dotted property path."""
    out: dict[str, dict[str, Any]] = {}
    options = [schema, *schema.get("anyOf", ()), *schema.get("oneOf", ())]
    found: dict[str, Any] = {}
    for option in options:
        found.update({k: option[k] for k in BOUNDS if k in option})
        if "enum" in option:
            found["enum"] = sorted(str(v) for v in option["enum"] if v is not None)
        items = option.get("items")
        if isinstance(items, dict):
            found.update({f"items.{k}": items[k] for k in BOUNDS if k in items})
            if "enum" in items:
                found["items.enum"] = sorted(str(v) for v in items["enum"])
        for name, prop in option.get("properties", {}).items():
            out.update(_limits(prop, f"{path}{name}."))
    if path and found:
        out[path.rstrip(".")] = found
    return out


@pytest.fixture(scope="module")
def openapi(app: Any) -> dict[str, Any]:
    return dict(call(app, "GET", "/openapi.json").json())


def _cli_command(name: str) -> Any:
    group = typer.main.get_command(cli_app)
    for part in name.split():
        group = group.commands[part]  # type: ignore[attr-defined]
    return group


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.rest], ids=lambda op: op.name)
def test_rest_routes_state_the_request_models_bounds(
    op: Operation, openapi: dict[str, Any]
) -> None:
    want = _limits(op.request.json_schema())
    for rest in op.rest:
        route = openapi["paths"][f"/v1{rest.path}"][rest.method.lower()]
        assert route["summary"] == op.summary
        responses = json.dumps(route["responses"]["200"])
        assert all(answer.__name__ in responses for answer in op.answers), responses
        if rest.method == "POST" and rest.body == "json":
            body = _resolve(route["requestBody"]["content"]["application/json"]["schema"], openapi)
            assert _limits(body) == want
            assert set(body["properties"]) == set(op.request.model_fields)
        else:
            params = {p["name"]: p for p in route.get("parameters", ())}
            for name in re.findall(r"\{(\w+)\}", rest.path):
                field = rest.params.get(name, name)
                bounds = want.get(field, {})
                if any(k.startswith("items.") for k in bounds):  # one value of a list field
                    bounds = {k[6:]: v for k, v in bounds.items() if k.startswith("items.")}
                shown = {k: v for k, v in params[name]["schema"].items() if k in BOUNDS}
                assert shown == {k: v for k, v in bounds.items() if k in BOUNDS}
        assert ("admin" in route.get("tags", ())) == op.admin


def _unwrap(kind: Any) -> Any:
    while isinstance(kind, GraphQLNonNull | GraphQLList):
        kind = kind.of_type
    return kind


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.graphql], ids=lambda op: op.name)
def test_graphql_fields_take_the_request_fields_and_give_the_answer_type(op: Operation) -> None:
    # GraphQL is read-only: an administration field is a view (GET on REST), never a write.
    assert not op.admin or all(rest.method == "GET" for rest in op.rest)
    field = graphql_schema._schema.query_type.fields[op.graphql]
    assert set(field.args) == {camel(name) for name in op.request.model_fields}
    scalars = {int: "Int", bool: "Boolean", float: "Float"}
    for name, info in op.request.model_fields.items():
        argument = field.args[camel(name)]
        assert argument.description == info.description
        if info.annotation in scalars:
            assert _unwrap(argument.type).name == scalars[info.annotation]
        if name == "filters":
            # and ``facets``: the store's declared facets, one JSON object (a GraphQL input type
            # is fixed when the schema is built; a facet is declared while the server runs)
            want = {camel(n) for n in FilterSpec.model_fields} | {"facets"}
            assert set(_unwrap(argument.type).fields) == want
        assert isinstance(argument.type, GraphQLNonNull) == info.is_required()
    returned = _unwrap(field.type)
    names = {t.name for t in getattr(returned, "types", [returned])}
    assert names == {answer.__name__ for answer in op.answers}
    assert not isinstance(returned, GraphQLScalarType)  # typed, never the JSON scalar


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.mcp], ids=lambda op: op.name)
def test_mcp_tools_take_the_request_models_schema(op: Operation) -> None:
    assert op.mcp is not None
    tool = ALL_TOOLS[op.mcp]
    assert op in tool.operations and (op.mcp in ADMIN_TOOLS) == op.admin
    got = _limits(tool.input_schema)
    for path, bounds in _limits(op.request.json_schema()).items():
        assert got[path] == bounds, path
    assert set(op.request.model_fields) <= set(tool.input_schema["properties"])
    output = json.dumps(tool.output_schema)
    assert all(f'"title": "{answer.__name__}"' in output for answer in op.answers)


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.cli], ids=lambda op: op.name)
def test_cli_commands_take_every_request_field_with_the_same_limits(op: Operation) -> None:
    assert op.cli is not None
    command = _cli_command(op.cli.command)
    arguments = [p.name for p in command.params if isinstance(p, TyperArgument)]
    assert arguments == list(op.cli.arguments)
    options = {p.opts[0]: p for p in command.params if isinstance(p, TyperOption)}
    for name, info in op.request.model_fields.items():
        if name in op.cli.arguments or name in op.cli.hidden:
            continue
        if name == "filters":
            for filter_name in FilterSpec.model_fields:
                assert "--" + filter_name.replace("_", "-") in options, filter_name
            continue
        option = options[cli_options.flag_of(name, op.cli)]
        assert (option.min, option.max) == cli_options.limits(info), name
    # reads take --as (the identity to read as); audit list's --as is a field (whose reads)
    reads_as = not op.admin and op.name != "stats"
    assert ("--as" in options) == (reads_as or op.cli.flags.get("identity") == "--as")
    assert "--json" in options


# -- the same bad request, refused alike everywhere --------------------------------------------------
#: (operation, its minimal good arguments, the field made bad, the bad value)
BAD = [
    ("search", {"query": "x"}, "k", 101),
    ("lexical", {"query": "x"}, "k", 1001),
    ("vector", {"query": "x"}, "k", 0),
    ("graph", {"starts": ["unit:vacuum"]}, "depth", 4),
    ("graph", {"starts": ["unit:vacuum"]}, "labels", ["mentions"]),
    ("sql", {}, "order", "body:asc"),
    ("sql", {}, "filters.created_from", "2024-13-01"),
    ("aggregate", {"metric": "count"}, "metric", "avg"),
    ("query_graph", {"query": "MATCH (n) RETURN n"}, "query", "x" * 10_001),
]


def _put(arguments: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(arguments))
    head, _, rest = path.partition(".")
    if rest:
        out.setdefault(head, {})[rest] = value
    else:
        out[head] = value
    return out


def _literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{camel(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return json.dumps(value)


def _cli_args(op: Operation, arguments: dict[str, Any]) -> list[str]:
    assert op.cli is not None
    args = []
    for name in op.cli.arguments:
        value = arguments[name]
        args.extend(value if isinstance(value, list) else [str(value)])
    for name, value in arguments.items():
        if name in op.cli.arguments:
            continue
        pairs = value.items() if name == "filters" else [(name, value)]
        for key, item in pairs:
            flag = (
                "--" + key.replace("_", "-")
                if name == "filters"
                else cli_options.flag_of(key, op.cli)
            )
            for one in item if isinstance(item, list) else [item]:
                args.extend([flag, str(one)])
    return args


@pytest.mark.parametrize(("name", "good", "field", "bad"), BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD])
def test_every_surface_refuses_a_bad_request_with_the_stores_words(
    app: Any, served: KnowledgeStore, name: str, good: dict[str, Any], field: str, bad: Any
) -> None:
    op = next(o for o in OPERATIONS if o.name == name)
    arguments = _put(good, field, bad)
    with pytest.raises(KnowledgeStoreError) as raised:
        op.request.parse(arguments)
    library = raised.value
    assert library.details.get("field") == field

    rest = op.rest[0]
    answer = call(app, "POST", f"/v1{rest.path}", json=arguments, headers=BOB).json()["error"]
    assert (answer["code"], answer["message"], answer["details"]["field"]) == (
        library.code,
        library.message,
        field,
    )

    if op.mcp is not None:
        tool_arguments = {**arguments, **({"mode": op.mcp_mode} if op.mcp_mode else {})}
        with pytest.raises(KnowledgeStoreError) as tool_error:
            call_tool(served, Caller(Identity("user:bob")), op.mcp, tool_arguments)
        assert tool_error.value.to_dict() == library.to_dict()

    assert op.graphql is not None
    given = ", ".join(f"{camel(k)}: {_literal(v)}" for k, v in arguments.items())
    document = f"{{ {op.graphql}({given}) {{ __typename }} }}"
    errors = call(app, "POST", "/graphql", json={"query": document}, headers=BOB).json()["errors"]
    spelled = respell(library, graphql_spelling(op))
    assert errors[0]["extensions"] == spelled.to_dict()["error"]
    assert errors[0]["message"] == spelled.message

    assert op.cli is not None
    result = CliRunner().invoke(
        cli_app,
        [
            op.cli.command.split()[0],
            *op.cli.command.split()[1:],
            *_cli_args(op, arguments),
            "--json",
        ],
    )
    assert result.exit_code == 2, result.output
    shown = json.loads(result.stdout)["error"]
    expected = respell(library, cli_options.spelling(op, op.cli))
    assert shown == expected.to_dict()["error"]
    placeholders = {cli_options.spelling(op, op.cli)[a] for a in op.cli.arguments}
    assert shown["details"]["field"].startswith("--") or shown["details"]["field"] in placeholders


# -- messages are surface-neutral ---------------------------------------------------------------------
def _flags() -> set[str]:
    """Every flag the CLI spells a request field with."""
    out = {"--acl", "--skip-invalid", "--format"}  # ks ingest's own
    for op in OPERATIONS:
        if op.cli is not None:
            out |= {v for v in cli_options.spelling(op, op.cli).values() if v.startswith("--")}
    return out


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant that is not a docstring, with its line."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_no_error_message_of_the_library_names_a_cli_flag() -> None:
    """REST, GraphQL and MCP show the library's sentences: none may name a CLI flag."""
    pattern = re.compile(
        r"(?<![\w-])(" + "|".join(map(re.escape, sorted(_flags()))) + r")(?![\w-])"
    )
    package = Path(knowledge_store.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if "surfaces" in path.parts or path.name == "export.py":  # export.py: its own argparse
            continue
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if pattern.search(text):
                found.append(f"{path.relative_to(package)}:{line}: {text[:80]!r}")
    assert found == []


# -- REST names the field (issue 15 item 8) -------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "code", "field", "words"),
    [
        ("/v1/lexical", {}, "invalid_request", "query", "query is required"),
        ("/v1/lexical", {"query": 5}, "invalid_request", "query", "query: "),
        ("/v1/lexical", {"query": "x", "k": "ten"}, "invalid_request", "k", "k: "),
        (
            "/v1/lexical",
            {"query": "x", "colour": 1},
            "invalid_request",
            "colour",
            "unknown argument",
        ),
        ("/v1/lexical", [1, 2], "invalid_request", "body", "JSON object"),
        ("/v1/graph", {"starts": ["a"], "depth": 9}, "bound_exceeded", "depth", "maximum of 3"),
        (
            "/v1/sql",
            {"filters": {"colour": ["red"]}},
            "unknown_field",
            "filters.colour",
            "filter on",
        ),
        (
            "/v1/admin/acl/grant",
            {"uid": "a"},
            "invalid_request",
            "principal",
            "principal is required",
        ),
    ],
)
def test_rest_validation_errors_name_the_field(
    app: Any, path: str, body: Any, code: str, field: str, words: str
) -> None:
    answer = call(app, "POST", path, json=body, headers=ROOT if "admin" in path else BOB)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["details"]["field"] == field
    assert words in error["message"] and "--" not in error["message"]


# -- the CLI: JSON always, a version, readable help (issue 15 item 4) ------------------------------
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["search", "x", "--k", "0"], "--k"),
        (["search", "x", "--k", "ten"], "--k"),
        (["search"], "TEXT"),
        (["search", "x", "--kk", "3"], None),
        (["graph", "--depth", "2"], "UID…"),
        (["acl", "grant", "only-a-uid"], "PRINCIPAL"),
    ],
)
def test_with_json_every_error_is_the_error_object(args: list[str], field: str | None) -> None:
    result = CliRunner().invoke(cli_app, [*args, "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "invalid_request" and error["message"]
    assert error["details"].get("field") == field
    assert "╭" not in result.output  # no usage box


def test_version_and_readable_help() -> None:
    from knowledge_store import __version__

    runner = CliRunner()
    assert runner.invoke(cli_app, ["--version"]).stdout.strip() == f"ks {__version__}"
    shown = runner.invoke(cli_app, ["search", "--help"], env={"COLUMNS": "160"}).stdout
    assert "<bool>" not in shown and "<str>" not in shown
    assert re.search(r"--explain\s{2,}include the lists", shown)  # a plain flag
    assert re.search(r"--k\s+N \[1<=x<=100\]", shown) and "TEXT" in shown
    assert re.search(r"--created-from\s+ISO-DATE", shown)


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += _commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def test_every_option_of_every_command_shows_a_placeholder() -> None:
    # ingest --help showed "--max-pages <int>", "--delay <float>", "--uid-prefix <str>"
    commands = _commands(typer.main.get_command(cli_app))
    assert ("ingest",) in commands and ("acl", "grant") in commands
    for command in commands:
        shown = CliRunner().invoke(cli_app, [*command, "--help"], env={"COLUMNS": "200"}).stdout
        assert not re.search(r"<(int|float|str|text|path|bool|integer)>", shown), (command, shown)


def test_principals_load_help_describes_the_file_it_reads() -> None:
    # it showed the REST body's description, "the memberships: [{group, member}, ...]",
    # for an argument that is a JSON Lines file (a JSON list in it is refused)
    shown = (
        CliRunner().invoke(cli_app, ["principals", "load", "--help"], env={"COLUMNS": "200"}).stdout
    )
    assert 'JSON Lines: one {"group", "member"} object a line' in shown
    assert "[{group, member}" not in shown


# -- every operation on every surface, or a stated reason why not ----------------------------------
SURFACES = ("rest", "graphql", "mcp", "cli")
_ADMIN_ACL = (
    "acl_grant",
    "acl_revoke",
    "acl_show",
    "acl_explain",
    "principals_add_member",
    "principals_remove_member",
    "principals_show",
    "principals_load",
)
#: Where an operation is deliberately absent, and why. A new operation is on every surface
#: unless it is named here; an operation put on a surface must leave this table.
ABSENT: dict[tuple[str, str], str] = {
    **{
        ("graphql", name): "GraphQL is read-only"
        for name in ("ingest", "delete", "facets_add", "facets_remove", *_ADMIN_ACL)
    },
    **{
        ("mcp", name): "an operator declares the store's fields; the tools' schemas carry the"
        " declared facets (their filters and dimensions), which is what a model needs"
        for name in ("facets_list", "facets_add", "facets_remove")
    },
    **{("mcp", name): "MCP tools administer content, not access" for name in _ADMIN_ACL},
    **{
        ("cli", name): "a tool for models (DESIGN §6 names the commands)"
        for name in (
            "docs_search",
            "code_sample_search",
            "search_knowledge",
            "fetch_content",
            "get_related",
            "get_learning_path",
            "resolve_xref",
            "graph_facets",
        )
    },
    **{
        ("mcp", name): "MCP tools go by intent (DESIGN §6): search and fetch_content cover it"
        for name in ("lexical", "fuzzy", "vector", "content", "graph_facets", "stats")
    },
    ("rest", "fetch_content"): "the model-sized view of GET /v1/content/{uid}",
    ("graphql", "fetch_content"): "the model-sized view of the content field",
    ("cli", "content"): "DESIGN §6 has no content command: content is read over HTTP and MCP",
    ("cli", "ingest"): "ks ingest loads files and URLs (its own command), not records",
    ("mcp", "sources"): "an operator's view (paths, sync figures) taking no arguments: REST,"
    " GraphQL and ks sources serve it; models read counts through sql aggregate --by source",
    **{
        (surface, "check"): "an operator's run that reads the whole store (minutes on a large"
        " one), not a query or a model's tool: ks check and GET /v1/admin/check serve it"
        for surface in ("graphql", "mcp")
    },
    **{
        (surface, name): "the audit log is an operator's record (who read what), read over"
        " REST and ks audit; a model never reads it"
        for surface in ("graphql", "mcp")
        for name in (
            "audit_list",
            "audit_show",
            "audit_verify",
            "audit_settings",
            "audit_replay",
            "gc",
        )
    },
}


def test_every_operation_is_on_every_surface_or_says_why() -> None:
    missing = {
        (surface, op.name) for op in OPERATIONS for surface in SURFACES if not getattr(op, surface)
    }
    assert missing == set(ABSENT), (
        f"on no surface and no reason given: {sorted(missing - set(ABSENT))};"
        f" stale reasons: {sorted(set(ABSENT) - missing)}"
    )
    # what the table declares, each surface really serves (REST: the test below)
    fields = graphql_schema._schema.query_type.fields
    for op in OPERATIONS:
        if op.graphql:
            assert op.graphql in fields, op.name
        if op.mcp:
            assert op in ALL_TOOLS[op.mcp].operations, op.name
        if op.cli:
            assert _cli_command(op.cli.command) is not None, op.name


def test_every_rest_route_of_the_table_is_served(openapi: dict[str, Any]) -> None:
    for op in OPERATIONS:
        for rest in op.rest:
            assert rest.method.lower() in openapi["paths"].get(f"/v1{rest.path}", {}), op.name


def test_the_reads_replay_runs_again_are_the_tables() -> None:
    """``ks audit replay`` runs a recorded read through ``StoreReader.answer`` with the request
    model ``retrieval.reader.READS`` names: the table's, for every read of the table."""
    from knowledge_store.retrieval.reader import READS

    reads = {op.reads: op.request for op in OPERATIONS if op.reads is not None}
    assert reads == dict(READS)
