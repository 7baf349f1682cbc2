"""The ``ks`` options of an operation, generated from its request model and the table's CLI spelling.

For an :class:`~.operations.Operation` with a :class:`~.operations.Cli`
spelling, :func:`parameters` gives the typer parameters of its command: the
positional arguments the table names, one option per other request field
(``--k N``, ``--depth N``, ``--label L``…, a flag for a boolean), and FILTERS
as the shared filter options generated from the request's ``FilterSpec``
(itself generated from ``FILTER_FIELDS``: a new filter field is a new option
with no edit here). Help text, defaults and the ``min``/``max`` of a number
come from the request model. Values reach the request model as typed — a
number as its text — so the CLI validates exactly like every other surface,
with the same words; :func:`spelling` maps the request's field names to the
flags and placeholders for the error messages.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.records import json_objects
from knowledge_store.model import FILTER_FIELDS
from knowledge_store.requests import FilterSpec
from knowledge_store.retrieval.fusion import parse_weights
from knowledge_store.surfaces.cli_graph import parse_params
from knowledge_store.surfaces.operations import Cli, Operation

__all__ = [
    "FACET_OPTION",
    "FILTER_PREFIX",
    "facet_filters",
    "filter_parameters",
    "filters_of",
    "limits",
    "parameters",
    "read_memberships",
    "request_values",
    "spelling",
    "with_filters",
]

#: Python names of the FILTERS options: ``filter_<request name>``.
FILTER_PREFIX = "filter_"
#: The Python name of ``--facet EXPR`` (a declared facet's filter: ``team=search``).
FACET_OPTION = "facet_filters"
_FACET_EXPR = re.compile(r"([a-z][a-z0-9_]*)\s*(!=|>=|<=|=)(.*)", re.DOTALL)
_KW = inspect.Parameter.KEYWORD_ONLY


def read_memberships(path: str) -> list[dict[str, str]]:
    """``{"group", "member"}`` JSON Lines → the memberships of a ``principals load``."""
    expected = '{"group": "group:<id>", "member": "user:<id>"}'
    return [
        {"group": str(obj["group"]), "member": str(obj["member"])}
        for obj in json_objects(Path(path), ("group", "member"), expected)
    ]


#: Fields whose command-line text is parsed into the request's value (the CLI's own
#: spelling): whether the option repeats, and the parser.
PARSERS: Mapping[str, tuple[bool, Callable[[Any], Any]]] = {
    "weights": (False, parse_weights),  # vector=1,lexical=0.5
    "params": (True, parse_params),  # --param NAME=VALUE …
    "memberships": (False, read_memberships),  # a JSON Lines file
}


def _keep(value: Any) -> Any:
    """Hand the text to the request model unconverted: it checks it, in the store's words."""
    return value


def _number(value: Any) -> Any:
    """An integer where the text is one (the model checks its bounds), else the text itself."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def limits(info: FieldInfo) -> tuple[Any, Any]:
    """A number field's ``(minimum, maximum)`` from its request model (None where unbounded)."""
    low = high = None
    for meta in info.metadata:
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    return low, high


def _choices(kind: Any) -> list[str]:
    origin = get_origin(kind)
    if origin is Literal:
        return [str(v) for v in get_args(kind)]
    if origin in (Union, types.UnionType, list):
        return [c for a in get_args(kind) for c in _choices(a)]
    return []


def _is_list(kind: Any) -> bool:
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        return any(_is_list(a) for a in get_args(kind))
    return origin is list


def _scalar(kind: Any) -> Any:
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        return next(_scalar(a) for a in get_args(kind) if a is not type(None))
    return kind


def flag_of(field: str, cli: Cli) -> str:
    return cli.flags.get(field, "--" + field.replace("_", "-"))


def _help(info: FieldInfo, choices: list[str] | None = None) -> str:
    """The field's description, its closed choices, and its default where it has a plain one."""
    text = info.description or ""
    if choices:
        text += ": " + " | ".join(choices)
    default = info.default
    if default is PydanticUndefined or default is None or default in ("", [], ()):
        return text
    return f"{text} [default: {default}]"


def facet_filters(expressions: Sequence[str]) -> dict[str, Any]:
    """``--facet`` expressions → a declared facet's request names: ``team=search`` (any of;
    repeat for more), ``team!=docs`` (none of), ``deadline>=2024-01-01`` and
    ``priority<=3`` (a date or number facet's range, inclusive)."""
    out: dict[str, Any] = {}
    for text in expressions:
        found = _FACET_EXPR.fullmatch(text.strip())
        if found is None:
            raise InvalidRequest(
                f"--facet {text[:80]!r}: write NAME=VALUE (any of; repeat it), NAME!=VALUE"
                " (none of), NAME>=VALUE or NAME<=VALUE (a range), e.g. --facet team=search",
                field="--facet",
            )
        name, op, value = found.group(1), found.group(2), found.group(3)
        if op == "=":
            out.setdefault(name, []).append(value)
        elif op == "!=":
            out.setdefault(f"not_{name}", []).append(value)
        else:
            out[f"{name}_{'from' if op == '>=' else 'to'}"] = value
    return out


def filter_parameters() -> list[inspect.Parameter]:
    """FILTERS: one option per request name of ``FilterSpec`` (repeatable lists, ISO dates),
    and ``--facet EXPR`` for the store's declared facets."""
    letters = {f.name: f.name[:1].upper() for f in FILTER_FIELDS}
    out = []
    for name, info in FilterSpec.model_fields.items():
        listed = _is_list(info.annotation)
        stem = name.removeprefix("not_")
        option = typer.Option(
            "--" + name.replace("_", "-"),
            metavar=letters.get(stem, "V") if listed else "ISO-DATE",
            help=(info.description or "") + (" (repeatable)" if listed else ""),
            show_default=False,
        )
        kind: Any = list[str] | None if listed else str | None
        out.append(
            inspect.Parameter(
                FILTER_PREFIX + name, _KW, default=None, annotation=Annotated[kind, option]
            )
        )
    facet = typer.Option(
        "--facet",
        metavar="EXPR",
        help="a declared facet (ks facets list): NAME=VALUE (any of), NAME!=VALUE (none of),"
        " NAME>=VALUE, NAME<=VALUE (a date's or number's range) (repeatable)",
        show_default=False,
    )
    out.append(
        inspect.Parameter(
            FACET_OPTION, _KW, default=None, annotation=Annotated[list[str] | None, facet]
        )
    )
    return out


def filters_of(given: Mapping[str, Any]) -> dict[str, Any]:
    """The FILTERS mapping of the options given (``filter_type`` → ``type``; ``--facet``
    expressions → the declared facets' names)."""
    out = facet_filters(given.get(FACET_OPTION) or ())
    for key, value in given.items():
        if key.startswith(FILTER_PREFIX) and value not in (None, [], ()):
            out[key.removeprefix(FILTER_PREFIX)] = (
                list(value) if isinstance(value, tuple) else value
            )
    return out


def parameters(op: Operation, cli: Cli) -> list[inspect.Parameter]:
    """The typer parameters of ``op``'s command: arguments, then options (see the module)."""
    fields = op.request.model_fields
    schema = op.request.json_schema()["properties"]
    out: list[inspect.Parameter] = []
    for name in cli.arguments:
        info = fields[name]
        listed = PARSERS[name][0] if name in PARSERS else _is_list(info.annotation)
        argument = typer.Argument(
            metavar=cli.metavars.get(name, name.upper()) + ("…" if listed else ""),
            help=cli.helps.get(name) or _help(info, schema[name].get("enum")),
            show_default=False,
        )
        kind: Any = list[str] if listed else str
        optional = name in cli.optional  # delete's uids, or --source instead
        out.append(
            inspect.Parameter(
                name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Annotated[kind | None if optional else kind, argument],
                default=None if optional else inspect.Parameter.empty,
            )
        )
    for name, info in fields.items():
        if name in cli.arguments or name in cli.hidden:
            continue
        if name == "filters":
            out.extend(filter_parameters())
            continue
        scalar = _scalar(info.annotation)
        if scalar is bool:
            option = typer.Option(flag_of(name, cli), help=info.description)
            out.append(
                inspect.Parameter(name, _KW, default=False, annotation=Annotated[bool, option])
            )
            continue
        listed = PARSERS[name][0] if name in PARSERS else _is_list(info.annotation)
        choices = _choices(info.annotation) or [
            str(c) for c in schema[name].get("enum", ()) if c is not None
        ]
        low, high = limits(info)
        short = bool(choices) and len(choices) <= 4
        named = name in cli.metavars  # the table's placeholder says what to write
        metavar = cli.metavars.get(name) or (
            "|".join(choices) if short else "N" if scalar is int else name.upper()
        )
        option = typer.Option(
            flag_of(name, cli),
            metavar=metavar,
            help=cli.helps.get(name)
            or _help(info, None if short or named else choices)
            + (" (repeatable)" if listed else ""),
            show_default=False,
            min=low,
            max=high,
            parser=None if listed else _number if scalar is int else _keep,
        )
        kind = list[str] | None if listed else (int | None if scalar is int else str | None)
        out.append(inspect.Parameter(name, _KW, default=None, annotation=Annotated[kind, option]))
    return out


def request_values(op: Operation, cli: Cli, given: Mapping[str, Any]) -> dict[str, Any]:
    """The request's raw arguments from the command's values (None: the model's default)."""
    raw: dict[str, Any] = {}
    for name in op.request.model_fields:
        if name == "filters":
            raw["filters"] = filters_of(given)
            continue
        value = given.get(name)
        if value is None or value == [] or value == ():
            continue
        if isinstance(value, tuple):
            value = list(value)
        raw[name] = PARSERS[name][1](value) if name in PARSERS else value
    return raw


def spelling(op: Operation, cli: Cli) -> dict[str, str]:
    """Request field paths → how the command line spells them (``--created-from``, ``TEXT``)."""
    out: dict[str, str] = {}
    for name in op.request.model_fields:
        if name in cli.arguments:
            out[name] = cli.metavars.get(name, name.upper())
        elif name == "filters":
            out.update(
                {f"filters.{n}": "--" + n.replace("_", "-") for n in FilterSpec.model_fields}
            )
            out["filters"] = "FILTERS"
        else:
            out[name] = flag_of(name, cli)
    return out


def with_filters(fn: Callable[..., None]) -> Callable[..., None]:
    """``fn`` with the FILTERS options added to its signature (for typer)."""
    signature = inspect.signature(fn, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    own = [p.replace(kind=p.KEYWORD_ONLY) for p in own]
    params = [*own, *filter_parameters()]
    fn.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn
