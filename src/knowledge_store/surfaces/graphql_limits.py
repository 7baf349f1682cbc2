"""The bounds of one GraphQL request, checked before anything runs; errors in the one shape.

A GraphQL document can ask for many store calls at once (500 aliased
``search`` fields ran 14.6 s and held the other callers). Before execution,
the document is refused when it is over any bound of :mod:`knowledge_store.model`:

==========================  =====================================================
``MAX_GRAPHQL_TOKENS``      lexical tokens (graphql-core stops parsing there)
``MAX_GRAPHQL_DEPTH``       nesting of selections (introspection fields aside)
``MAX_GRAPHQL_ALIASES``     aliases written in the document
``MAX_GRAPHQL_FIELDS``      top-level fields of an operation: each is a store call
==========================  =====================================================

Depth, aliases and top-level fields are one rule of ours, linear in the
document: strawberry's ``QueryDepthLimiter`` and ``MaxAliasesLimiter`` expand
every fragment spread afresh, so a chain of 20 fragments that each spread the
next twice (300 tokens) kept them busy for 7–23 s — a bound that is itself a
way to starve the server. Here each fragment is measured once. Top-level
fields are counted by response key, as execution merges them.

The request body is bounded before it is parsed
(:mod:`~knowledge_store.surfaces.limits`), and the store calls of one request
run one after another (``graphql._run``), so one request never holds more
than one worker. Every parse or validation error leaves with ``extensions`` =
``{"code", "message", "details"}`` — ``bound_exceeded`` for the bounds,
``invalid_request`` for the rest — and a message cut to
:data:`MAX_MESSAGE_CHARS`, so that an error never echoes a large part of the
request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    Node,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationContext,
    ValidationRule,
)
from strawberry.extensions import AddValidationRules, MaxTokensLimiter, SchemaExtension

from knowledge_store.model import (
    MAX_GRAPHQL_ALIASES,
    MAX_GRAPHQL_DEPTH,
    MAX_GRAPHQL_FIELDS,
    MAX_GRAPHQL_TOKENS,
)

__all__ = ["MAX_MESSAGE_CHARS", "DocumentShape", "limit_extensions"]

#: The longest error message a GraphQL answer carries (longer ones are cut).
MAX_MESSAGE_CHARS = 500
_TOKENS_REFUSAL = "Document contains more than"


class DocumentShape:
    """Depth, aliases and top-level response keys of a document; each fragment measured once."""

    def __init__(self, document: DocumentNode) -> None:
        self.fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self._depths: dict[str, int] = {}
        self._keys: dict[str, frozenset[str]] = {}
        self.aliases = sum(_aliases(d) for d in document.definitions)

    def depth(self, selection_set: SelectionSetNode | None) -> int:
        """How deep the selection nests (a leaf field is 0, introspection fields count 0)."""
        deepest = 0
        for node in selection_set.selections if selection_set else ():
            if isinstance(node, FieldNode):
                inner = (
                    0
                    if node.name.value.startswith("__") or node.selection_set is None
                    else (1 + self.depth(node.selection_set))
                )
            elif isinstance(node, InlineFragmentNode):
                inner = self.depth(node.selection_set)
            elif isinstance(node, FragmentSpreadNode):
                inner = self._fragment_depth(node.name.value)
            else:  # pragma: no cover - the three kinds of selection
                inner = 0
            deepest = max(deepest, inner)
        return deepest

    def _fragment_depth(self, name: str) -> int:
        if name not in self._depths:
            self._depths[name] = 0  # a cycle (refused by the standard rules) ends here
            fragment = self.fragments.get(name)
            self._depths[name] = self.depth(fragment.selection_set if fragment else None)
        return self._depths[name]

    def keys(self, selection_set: SelectionSetNode | None) -> frozenset[str]:
        """The response keys a selection asks for at its own level, fragments expanded."""
        found: set[str] = set()
        for node in selection_set.selections if selection_set else ():
            if isinstance(node, FieldNode) and not node.name.value.startswith("__"):
                found.add((node.alias or node.name).value)
            elif isinstance(node, InlineFragmentNode):
                found |= self.keys(node.selection_set)
            elif isinstance(node, FragmentSpreadNode):
                found |= self._fragment_keys(node.name.value)
        return frozenset(found)

    def _fragment_keys(self, name: str) -> frozenset[str]:
        if name not in self._keys:
            self._keys[name] = frozenset()
            fragment = self.fragments.get(name)
            self._keys[name] = self.keys(fragment.selection_set if fragment else None)
        return self._keys[name]


def _aliases(node: Node) -> int:
    """Aliases written under ``node`` (each counted once, however often it is spread)."""
    selection_set = getattr(node, "selection_set", None)
    count = 1 if isinstance(node, FieldNode) and node.alias is not None else 0
    for child in selection_set.selections if selection_set else ():
        count += _aliases(child)
    return count


def _refusal(message: str, bound: str, maximum: int, found: int, node: Node) -> GraphQLError:
    return GraphQLError(
        message,
        node,
        extensions=_shape("bound_exceeded", message, bound=bound, maximum=maximum, found=found),
    )


class _Bounds(ValidationRule):
    """Depth, aliases and top-level fields within the bounds (see the module docstring)."""

    def __init__(self, context: ValidationContext) -> None:
        super().__init__(context)
        document = context.document
        shape = DocumentShape(document)
        if shape.aliases > MAX_GRAPHQL_ALIASES:
            context.report_error(
                _refusal(
                    f"the document has {shape.aliases} aliases; the maximum is"
                    f" {MAX_GRAPHQL_ALIASES}: send several requests",
                    "aliases",
                    MAX_GRAPHQL_ALIASES,
                    shape.aliases,
                    document,
                )
            )
        for operation in document.definitions:
            if not isinstance(operation, OperationDefinitionNode):
                continue
            depth = shape.depth(operation.selection_set)
            if depth > MAX_GRAPHQL_DEPTH:
                context.report_error(
                    _refusal(
                        f"the operation nests {depth} levels deep; the maximum is"
                        f" {MAX_GRAPHQL_DEPTH}",
                        "depth",
                        MAX_GRAPHQL_DEPTH,
                        depth,
                        operation,
                    )
                )
            fields = len(shape.keys(operation.selection_set))
            if fields > MAX_GRAPHQL_FIELDS:
                context.report_error(
                    _refusal(
                        f"the operation asks for {fields} top-level fields; the maximum is"
                        f" {MAX_GRAPHQL_FIELDS} (each is one store call): send several requests",
                        "fields",
                        MAX_GRAPHQL_FIELDS,
                        fields,
                        operation,
                    )
                )


def _shape(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code, "message": _cut(message), "details": details}


def _cut(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"


def _in_shape(error: GraphQLError) -> None:
    """Give a parse or validation error the one error shape (in place), its message cut."""
    error.message = _cut(error.message)
    if (error.extensions or {}).get("code"):
        return
    if _TOKENS_REFUSAL in error.message:
        error.extensions = _shape(
            "bound_exceeded",
            f"the document has more than {MAX_GRAPHQL_TOKENS} tokens; send a shorter one"
            " (values as variables, several requests)",
            bound="tokens",
            maximum=MAX_GRAPHQL_TOKENS,
        )
        return
    error.extensions = _shape("invalid_request", error.message)


class _ErrorShape(SchemaExtension):
    def _shape_errors(self) -> None:
        for error in self.execution_context.pre_execution_errors or ():
            _in_shape(error)

    def on_parse(self) -> Iterator[None]:
        yield
        self._shape_errors()

    def on_validate(self) -> Iterator[None]:
        yield
        self._shape_errors()


def limit_extensions() -> list[Callable[[], SchemaExtension]]:
    """The schema extensions that enforce the bounds (a factory each: one per request)."""
    return [
        _ErrorShape,
        partial(MaxTokensLimiter, max_token_count=MAX_GRAPHQL_TOKENS),
        partial(AddValidationRules, [_Bounds]),
    ]
