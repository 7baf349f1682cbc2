"""REST under ``/v1/`` (OpenAPI at ``/openapi.json``), generated from the operation table.

Every operation with a REST spelling (:data:`~.operations.OPERATIONS`) is a
route: a ``POST`` takes the operation's request model as its JSON body, a
``GET``/``DELETE`` takes the request's fields from its path; the answer model
is the route's response model. So the OpenAPI document states exactly the
bounds and shapes of the store, and a body is validated by the same model as
on every other surface — a bad one is answered by the store's own error,
naming the field (:func:`request_error`). The route runs the operation as the
caller (the admin scope where the table says so: 403 without it) in the worker
lane its size asks for (:func:`~.workers.is_heavy`); the answer is the
``--json`` shape of DESIGN §6. The admin ingest takes records in its body only
— no route reads a path on the server.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from knowledge_store.errors import InvalidRequest, KnowledgeStoreError, Rejection
from knowledge_store.ingest.loaders.jsonl import json_lines
from knowledge_store.ingest.records import loads_strict, not_a_record
from knowledge_store.requests import RecordLines
from knowledge_store.surfaces.auth import AuthError, Caller, bearer_token
from knowledge_store.surfaces.operations import OPERATIONS, Operation, Rest, perform
from knowledge_store.surfaces.shapes import Capabilities, ErrorEnvelope
from knowledge_store.surfaces.tools import call_tool, capabilities, heavy_call
from knowledge_store.surfaces.web import AdminCaller, AnyCaller, Service, the_service
from knowledge_store.surfaces.workers import is_heavy

__all__ = ["ErrorEnvelope", "request_error", "router", "routers"]

Svc = Annotated[Service, Depends(the_service)]
_PARAM = re.compile(r"\{(\w+)\}")


_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorEnvelope, "description": text}
    for status, text in (
        (400, "invalid request (which field, what was expected)"),
        (401, "no or unknown bearer token"),
        (404, "not found — or not readable by the caller (they look the same)"),
    )
}
_ADMIN_ERRORS = {
    **_ERRORS,
    403: {"model": ErrorEnvelope, "description": "needs a token with the admin scope"},
    422: {"model": ErrorEnvelope, "description": "a bad ingest record; nothing was published"},
}

router = APIRouter(prefix="/v1", responses=_ERRORS)


# -- the routes of the table ----------------------------------------------------------------------
def _path_fields(op: Operation, rest: Rest) -> dict[str, str]:
    """Path parameter → request field."""
    return {name: rest.params.get(name, name) for name in _PARAM.findall(rest.path)}


def _raw(op: Operation, rest: Rest, values: Mapping[str, Any]) -> dict[str, Any]:
    """The request's raw arguments from a route's path and query values."""
    raw: dict[str, Any] = {}
    fields = op.request.model_fields
    for name, value in values.items():
        target = rest.params.get(name, name)
        if target not in fields or value is None:
            continue
        listed = _is_list(fields[target])
        raw[target] = [value] if listed and isinstance(value, str) else value
    return raw


def _is_list(info: Any) -> bool:
    kind = info.annotation
    return get_origin(kind) is list or any(get_origin(a) is list for a in get_args(kind))


def _field_schema(op: Operation, field: str) -> dict[str, Any]:
    schema: dict[str, Any] = op.request.json_schema()["properties"][field]
    return schema.get("items", schema) if schema.get("type") == "array" else schema


def _parameters(op: Operation, rest: Rest) -> list[inspect.Parameter]:
    """The endpoint's parameters: the service, the caller, then the request's way in."""
    who = AdminCaller if op.admin else AnyCaller
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("svc", kw, annotation=Svc),
        inspect.Parameter("who", kw, annotation=who),
    ]
    for name, field in _path_fields(op, rest).items():
        info = op.request.model_fields[field]
        # documented, not checked here: the request model checks it, in the store's words
        spec = Path(description=info.description, json_schema_extra=_field_schema(op, field))
        params.append(inspect.Parameter(name, kw, annotation=Annotated[str, spec]))
    if rest.method == "POST" and rest.body == "json":
        body = Body(description=(op.request.__doc__ or "").strip() or None)
        params.append(inspect.Parameter("body", kw, annotation=Annotated[op.request, body]))
    elif rest.body == "records":
        params.append(inspect.Parameter("request", kw, annotation=Request))
        for name, info in op.request.model_fields.items():
            if name == "records":
                continue
            kind: Any = list[str] | None if _is_list(info) else str | None
            query = Query(description=info.description)
            params.append(
                inspect.Parameter(name, kw, default=None, annotation=Annotated[kind, query])
            )
    return params


def _endpoint(op: Operation, rest: Rest) -> Callable[..., Awaitable[Response]]:
    async def endpoint(**given: Any) -> Response:
        svc: Service = given.pop("svc")
        who: Caller = given.pop("who")
        body = given.pop("body", None)
        context = None
        if isinstance(body, op.request):
            request: Any = body
            raw = body.model_dump()
        else:
            raw = _raw(op, rest, given)
            if rest.body == "records":
                http: Request = given["request"]
                content = await http.body()  # bounded before it arrives (surfaces.limits)
                kind = http.headers.get("content-type", "")
                raw["records"], lines = await svc.run(records_of, content, kind, heavy=True)
                context = {RecordLines.CONTEXT_KEY: lines} if lines else None
            request = raw  # parsed by perform: a request that does not parse is recorded too
        heavy = op.heavy or is_heavy(op.name, raw)
        body = await svc.run(_answer_json, op, svc.store, who, request, context, heavy=heavy)
        if op.admin:
            await svc.watcher.check()  # an ingest or a delete may flip is_empty: tell MCP sessions
        return Response(body, media_type="application/json")

    params = _parameters(op, rest)
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    endpoint.__annotations__ = {p.name: p.annotation for p in params}
    endpoint.__name__ = op.name
    endpoint.operation = op  # type: ignore[attr-defined]  # for request_error
    endpoint.rest = rest  # type: ignore[attr-defined]
    return endpoint


def _answer_json(
    op: Operation, store: Any, who: Caller, request: Any, context: Any = None
) -> bytes:
    """Run the operation (recorded: :func:`~.operations.perform`) and serialise its answer,
    once, in the worker thread (pydantic's own JSON serialiser: the ``to_dict()`` shape,
    without a dict and ``json.dumps`` on the event loop)."""
    answer = perform(op, store, who, request, surface="rest", context=context)
    return answer.model_dump_json().encode()


def _response_model(op: Operation) -> Any:
    return op.answers[0] if len(op.answers) == 1 else Union[op.answers]  # noqa: UP007


def _add_routes() -> None:
    for op in OPERATIONS:
        for rest in op.rest:
            router.add_api_route(
                rest.path.replace("}", ":path}") if _PARAM.search(rest.path) else rest.path,
                _endpoint(op, rest),
                methods=[rest.method],
                response_model=_response_model(op),
                summary=op.summary,
                description=op.description,
                tags=["admin"] if op.admin else None,
                responses=_ADMIN_ERRORS if op.admin else _ERRORS,
                openapi_extra=_INGEST_BODY if rest.body == "records" else None,
            )


_INGEST_BODY = {
    "requestBody": {
        "required": True,
        "description": "JSON Lines (one canonical record a line), a JSON list of records, or"
        ' {"records": [...]}',
        "content": {
            "application/x-ndjson": {"schema": {"type": "string"}},
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"type": "array", "items": {"type": "object"}},
                        {
                            "type": "object",
                            "properties": {
                                "records": {"type": "array", "items": {"type": "object"}}
                            },
                            "required": ["records"],
                        },
                    ]
                }
            },
        },
    }
}


#: The file name a rejection of a JSON Lines body gives (its lines are the body's own).
BODY = "<body>"


def records_of(raw: bytes, content_type: str) -> tuple[list[Any], RecordLines | None]:
    """The records of an ingest body: JSON Lines, a JSON list, or ``{"records": [...]}``.

    JSON Lines are read the way the CLI reads a file: a line that is not UTF-8, not JSON or
    not an object is refused as its own bad record (the batch then fails, or publishes the
    rest with skip_invalid), and every rejection names the body's line."""
    if not raw.strip():
        raise InvalidRequest("the ingest body is empty; send JSON Lines records", field="records")
    if "json" in content_type and "ndjson" not in content_type and "jsonl" not in content_type:
        try:
            document = loads_strict(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidRequest("the ingest body is not UTF-8 text", field="records") from None
        except ValueError as exc:
            raise InvalidRequest(f"the ingest body is not JSON: {exc}", field="records") from None
        if isinstance(document, dict) and isinstance(document.get("records"), list):
            return list(document["records"]), None
        if isinstance(document, list):
            return document, None
        raise InvalidRequest('send a JSON list of records or {"records": [...]}', field="records")
    records: list[Any] = []
    lines: list[int] = []
    refused: list[Rejection] = []
    for item in json_lines(io.BytesIO(raw), BODY):
        if isinstance(item, Rejection):
            refused.append(item)
        elif (problem := not_a_record(item[1])) is not None:
            refused.append(Rejection(BODY, item[0], None, None, problem))
        else:
            records.append(item[1])
            lines.append(item[0])
    return records, RecordLines(BODY, tuple(lines), tuple(refused))


_add_routes()


# -- what a caller can do -----------------------------------------------------------------------
@router.get(
    "/capabilities",
    summary="The tools this caller sees now",
    response_model=Capabilities,
)
async def capabilities_route(svc: Svc, who: AnyCaller) -> JSONResponse:
    found = await svc.run(capabilities, svc.store, who)
    return JSONResponse(found.to_dict())


@router.post("/tools/{name}", summary="Call a listed tool by name (the MCP tools over REST)")
async def tool_route(
    name: Annotated[str, Path(max_length=100)],
    arguments: dict[str, Any],
    svc: Svc,
    who: AnyCaller,
) -> dict[str, Any]:
    out = await svc.run(
        call_tool, svc.store, who, name, arguments, heavy=heavy_call(name, arguments)
    )
    await svc.watcher.check()
    return out


# -- validation errors ----------------------------------------------------------------------------
def request_error(request: Request, problems: list[Any], body: Any) -> KnowledgeStoreError:
    """A request FastAPI refused, answered with the store's own error for it.

    The route's request is validated again by its request model, so the error
    is the one every surface gives for it, naming the field
    (``filters.created_from``, ``query``); a body that is no JSON object, or
    a route outside the table, gets a sentence naming where.
    """
    for problem in problems:
        if problem.get("type") == "json_invalid":
            where = (problem.get("ctx") or {}).get("error", "")
            return InvalidRequest(f"the request body is not valid JSON: {where}", field="body")
    route = request.scope.get("route")
    op: Operation | None = getattr(getattr(route, "endpoint", None), "operation", None)
    rest: Rest | None = getattr(getattr(route, "endpoint", None), "rest", None)
    if op is not None and rest is not None:
        if body is not None and not isinstance(body, Mapping):
            return InvalidRequest(
                f"the request body must be a JSON object with the fields of {op.name}:"
                f" {', '.join(op.request.model_fields)}",
                field="body",
            )
        raw = {**(body or {}), **_raw(op, rest, dict(request.path_params))}
        try:
            op.request.parse(raw)
        except KnowledgeStoreError as exc:
            return exc
    first = problems[0] if problems else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(loc) or "body"
    if not loc:
        return InvalidRequest("the request body is required: send a JSON object", field=field)
    return InvalidRequest(f"{field}: {first.get('msg', 'invalid')}", field=field)


async def record_refused(request: Request, body: Any, error: KnowledgeStoreError) -> None:
    """A request of the table whose body FastAPI refused, recorded in the audit log as
    :func:`~.operations.perform` records the others (its fields as given, its error) — when
    its caller is someone: a request refused for want of a valid token is not a caller's."""
    route = request.scope.get("route")
    op: Operation | None = getattr(getattr(route, "endpoint", None), "operation", None)
    if op is None:
        return
    svc: Service = request.app.state.knowledge_store
    try:
        who = await svc.access.resolve(bearer_token(request.headers.get("authorization")))
    except AuthError:
        return
    if op.admin and not who.admin:
        return
    raw = dict(body) if isinstance(body, Mapping) else {"body": body}
    await svc.run(_record_refusal, op, svc.store, who, raw, error)


def _record_refusal(
    op: Operation, store: Any, who: Caller, raw: dict[str, Any], error: KnowledgeStoreError
) -> None:
    with (
        contextlib.suppress(KnowledgeStoreError),
        store.auditor.recording(
            "rest",
            op.name,
            subject=who.subject,
            identity=who.principal,
            admin=who.admin,
            request=raw,
        ),
    ):
        raise error


def routers() -> list[APIRouter]:
    return [router]
