"""The bounds of one GraphQL request, checked before anything runs; errors in the one shape.

A GraphQL document can ask for many store calls at once (500 aliased
``search`` fields ran 14.6 s and held the other callers). A document over any
bound of :mod:`knowledge_store.model` is refused before it is validated or run:

============================  =====================================================
``MAX_GRAPHQL_TOKENS``        lexical tokens (graphql-core stops parsing there)
``MAX_GRAPHQL_SELECTIONS``    fields written in the document, at every level
``MAX_GRAPHQL_DEPTH``         nesting of selections (introspection fields aside)
``MAX_GRAPHQL_ALIASES``       aliases written in the document
``MAX_GRAPHQL_FIELDS``        top-level fields of an operation: each is a store call
============================  =====================================================

The checks are ours, linear in the document, and run *before* graphql-core's
validation: strawberry's ``QueryDepthLimiter`` and ``MaxAliasesLimiter``
expand every fragment spread afresh (a chain of 20 fragments that each spread
the next twice — 300 tokens — kept them busy 7–23 s), and graphql-core's
``OverlappingFieldsCanBeMerged`` is quadratic in the fields of one selection
(9,000 ``x`` fields: 2.3 s), so a bound checked by those would itself be a way
to hold the event loop. Here each fragment is measured once, and top-level
fields are counted by response key, as execution merges them.

The request body is bounded before it is parsed
(:mod:`~knowledge_store.surfaces.limits`), and the store calls of one request
run one after another (``graphql._run``), so one request never holds more
than one worker. Every parse or validation error leaves with ``extensions`` =
``{"code", "message", "details"}`` — ``bound_exceeded`` for the bounds,
``invalid_request`` for the rest — and a message cut to
:data:`~knowledge_store.errors.MAX_MESSAGE_CHARS`, so that an error never
echoes a large part of the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
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
    parse,
)
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

from knowledge_store.errors import clip
from knowledge_store.model import (
    MAX_GRAPHQL_ALIASES,
    MAX_GRAPHQL_DEPTH,
    MAX_GRAPHQL_FIELDS,
    MAX_GRAPHQL_SELECTIONS,
    MAX_GRAPHQL_TOKENS,
)
from knowledge_store.surfaces.workers import run_store

__all__ = ["DocumentShape", "RequestBounds"]

_TOKENS_REFUSAL = "Document contains more than"


class DocumentShape:
    """Selections, depth, aliases and top-level response keys; each fragment measured once."""

    def __init__(self, document: DocumentNode) -> None:
        self.fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        self._depths: dict[str, int] = {}
        self._keys: dict[str, frozenset[str]] = {}
        written = [_written(d) for d in document.definitions]
        self.selections = sum(fields for fields, _ in written)
        self.aliases = sum(aliases for _, aliases in written)

    def depth(self, selection_set: SelectionSetNode | None) -> int:
        """How deep the selection nests (a leaf field is 0, introspection fields count 0)."""
        deepest = 0
        for node in selection_set.selections if selection_set else ():
            if isinstance(node, FieldNode):
                leaf = node.name.value.startswith("__") or node.selection_set is None
                inner = 0 if leaf else 1 + self.depth(node.selection_set)
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

    def refusals(self, document: DocumentNode) -> list[GraphQLError]:
        """One error per bound the document is over; none when it is within them all."""
        errors: list[GraphQLError] = []

        def over(bound: str, found: int, maximum: int, said: str, node: Node) -> None:
            if found > maximum:
                message = f"{said.format(found)}; the maximum is {maximum}: send several requests"
                details = {"bound": bound, "maximum": maximum, "found": found}
                extensions = _shape("bound_exceeded", message, **details)
                errors.append(GraphQLError(message, node, extensions=extensions))

        written = "the document writes {} "
        over("selections", self.selections, MAX_GRAPHQL_SELECTIONS, written + "fields", document)
        over("aliases", self.aliases, MAX_GRAPHQL_ALIASES, written + "aliases", document)
        for operation in document.definitions:
            if not isinstance(operation, OperationDefinitionNode):
                continue
            depth = self.depth(operation.selection_set)
            over("depth", depth, MAX_GRAPHQL_DEPTH, "the operation nests {} levels deep", operation)
            fields = len(self.keys(operation.selection_set))
            said = "the operation asks for {} top-level fields (a store call each)"
            over("fields", fields, MAX_GRAPHQL_FIELDS, said, operation)
        return errors


def _written(node: Node) -> tuple[int, int]:
    """``(fields, aliases)`` written under ``node``, each counted once however often spread."""
    selection_set = getattr(node, "selection_set", None)
    fields = aliases = 0
    if isinstance(node, FieldNode):
        fields, aliases = 1, int(node.alias is not None)
    for child in selection_set.selections if selection_set else ():
        more_fields, more_aliases = _written(child)
        fields += more_fields
        aliases += more_aliases
    return fields, aliases


def _shape(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code, "message": _cut(message), "details": details}


def _cut(message: str) -> str:
    cut: str = clip(message)
    return cut


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


class RequestBounds(SchemaExtension):
    """The bounds of the module docstring, and the one error shape for every early error.

    Parsing and validation run in the light worker lane, not on the event loop:
    bounded as they are, they are still the CPU-heavy part of a GraphQL request.
    """

    def on_operation(self) -> Iterator[None]:
        self.execution_context.parse_options["max_tokens"] = MAX_GRAPHQL_TOKENS
        yield

    async def on_parse(self) -> AsyncIterator[None]:
        context = self.execution_context
        if context.graphql_document is None and context.query:
            try:
                context.graphql_document = await run_store(
                    parse, context.query, max_tokens=MAX_GRAPHQL_TOKENS
                )
            except GraphQLError as error:
                _in_shape(error)
                raise  # strawberry answers it as a pre-execution error
        yield
        self._shape_errors()

    async def on_validate(self) -> AsyncIterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and context.pre_execution_errors is None:
            refused = DocumentShape(document).refusals(document)
            # errors set here (even none) tell strawberry that validation has run
            context.pre_execution_errors = refused or await run_store(
                validate_document, context.schema._schema, document, context.validation_rules
            )
        yield
        self._shape_errors()

    def _shape_errors(self) -> None:
        for error in self.execution_context.pre_execution_errors or ():
            _in_shape(error)
