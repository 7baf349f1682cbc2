"""The request models of the reads: the primitives, fused search, the docs tools, content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

import numpy as np
from pydantic import BeforeValidator, Field, PrivateAttr, field_validator, model_validator

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import (
    DEFAULT_DEPTH,
    DEFAULT_DIRECTION,
    DEFAULT_K,
    DEFAULT_KNOWLEDGE_K,
    GRAPH_MAX_DEPTH,
    MAX_K,
    MAX_SEARCH_K,
    MAX_STARTS,
    MAX_TEXT_LENGTH,
    MAX_UID_LENGTH,
    ORDER_FIELDS,
    QUERY_GRAPH_MAX_LENGTH,
    AggregateSpec,
    Direction,
    FusionMode,
    GraphQuery,
    Label,
    Order,
)
from knowledge_store.requests.base import (
    DimensionText,
    Filtering,
    MetricText,
    OrderText,
    Request,
    Text,
    Uid,
    Weight,
    listed,
)

__all__ = [
    "AggregateRequest",
    "ContentRequest",
    "DocsSearchRequest",
    "FacetsRequest",
    "FuzzyRequest",
    "GraphRequest",
    "KnowledgeRequest",
    "LearningPathRequest",
    "LexicalRequest",
    "QueryGraphRequest",
    "RelatedRequest",
    "SearchRequest",
    "SqlRequest",
    "VectorRequest",
    "XrefRequest",
]


# -- reads ----------------------------------------------------------------------------------------------
def _needs_words(operation: str) -> str:
    return f"{operation} needs a non-empty text to look for (a blank one matches nothing)"


def _words(request: Any, operation: str) -> None:
    """Blank text to a read that ranks by it: an error, not an answer with nothing in it."""
    if not request.query.strip():
        raise InvalidRequest(_needs_words(operation), field="query")


#: A cursor: ``*`` to start paging, then the ``next`` of the page before.
_CURSOR_CHARS = 200


def _cursor() -> Any:
    return Field(
        None,
        min_length=1,
        max_length=_CURSOR_CHARS,
        description="page through up to 1,000 results: '*' for the first page (the answer's"
        " next names the following one), then that next; every other argument as on the first"
        " page (k may change)",
    )


class DocsSearchRequest(Request):
    """Fused search by words (an empty query: a pure filter request)."""

    text_fields: ClassVar[tuple[str, ...]] = ("query",)

    query: Text = Field(
        "",
        max_length=MAX_TEXT_LENGTH,
        description="what to look for, in words (a question, a phrase, an identifier); empty"
        " for a pure filter request",
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_SEARCH_K, description="how many results")
    filters: Filtering

    @model_validator(mode="after")
    def _words_or_filters(self) -> Self:
        """Blank text is a pure filter request — which needs a filter to request."""
        if not self.query.strip() and not self.filters.as_mapping():
            raise InvalidRequest(
                "search needs a text to look for, or at least one filter for a pure filter"
                " request (a blank text with no filter would only list everything; sql lists"
                " entities by their fields)",
                field="query",
            )
        return self


class SearchRequest(DocsSearchRequest):
    """Fused search with the fusion's knobs."""

    mode: FusionMode | None = Field(None, description="fusion mode (default adaptive)")
    weights: dict[str, Weight] | None = Field(
        None, description="per-list weights; 0 switches a list off"
    )
    explain: bool = Field(False, description="include the lists side by side with timings")
    cursor: str | None = _cursor()


class KnowledgeRequest(Request):
    """``search_knowledge``: fused search as cited passages."""

    text_fields: ClassVar[tuple[str, ...]] = ("query",)

    needs: ClassVar[dict[str, str]] = {"query": _needs_words("search_knowledge")}

    query: Text = Field(
        ..., min_length=1, max_length=MAX_TEXT_LENGTH, description="the question, in words"
    )
    k: int = Field(
        DEFAULT_KNOWLEDGE_K, ge=1, le=MAX_SEARCH_K, description="how many sources to return"
    )
    filters: Filtering

    @model_validator(mode="after")
    def _not_blank(self) -> Self:
        _words(self, "search_knowledge")
        return self


class LexicalRequest(Request):
    """BM25 over chunks."""

    text_fields: ClassVar[tuple[str, ...]] = ("query",)

    needs: ClassVar[dict[str, str]] = {"query": _needs_words("lexical")}

    query: Text = Field(
        ..., min_length=1, max_length=MAX_TEXT_LENGTH, description="the text to look for"
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="how many chunks")
    filters: Filtering
    explain: bool = Field(False, description="include how the answer was computed")
    cursor: str | None = _cursor()

    @model_validator(mode="after")
    def _not_blank(self) -> Self:
        _words(self, "lexical")
        return self


class FuzzyRequest(LexicalRequest):
    """Typo-tolerant BM25 over chunks: each word no readable chunk holds is searched as the
    nearest word (one edit away) that some do."""

    needs: ClassVar[dict[str, str]] = {"query": _needs_words("fuzzy")}

    @model_validator(mode="after")
    def _not_blank(self) -> Self:
        _words(self, "fuzzy")
        return self


class VectorRequest(Request):
    """Dense nearest chunks by meaning, of a text or of a query vector."""

    text_fields: ClassVar[tuple[str, ...]] = ("query", "vector")

    query: Text = Field(
        "", max_length=MAX_TEXT_LENGTH, description="the text whose meaning to look for"
    )
    vector: list[float] | None = Field(
        None, description="a query vector instead of a text (the store's dimension)"
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="how many chunks")
    filters: Filtering
    explain: bool = Field(False, description="include how the answer was computed")
    cursor: str | None = _cursor()
    #: The array a request made by :meth:`of_array` holds, with the list it was checked as.
    _array: tuple[list[float] | None, np.ndarray] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _one_query(self) -> Self:
        if (self.vector is None) == (not self.query.strip()):
            # no field name in the sentence but the one it is about: each surface respells
            # that one (the CLI's TEXT), and the CLI has no vector to mention
            raise InvalidRequest(
                _needs_words("vector")
                if self.vector is None
                else "vector takes a text or a vector of numbers, not both",
                field="query",
            )
        return self

    @classmethod
    def of_array(cls, vector: np.ndarray, **fields: Any) -> VectorRequest:
        """The request of a query vector given as an array: validated as its list of numbers,
        and the array kept, so the engine searches with it rather than one rebuilt from the
        list (384 numbers there and back cost a vector primitive at top-10 about 5%)."""
        array = np.array(vector, dtype=np.float32).reshape(-1)  # a copy: the caller's may change
        request = cls.parse(vector=array.tolist(), **fields)
        request._array = (request.vector, array)
        return request

    def query_vector(self) -> np.ndarray | None:
        """The query vector as float32; None for a text query."""
        if self.vector is None:
            return None
        kept = self._array
        if kept is not None and kept[0] is self.vector:  # not a copy with another vector
            return kept[1]
        return np.asarray(self.vector, dtype=np.float32)


class GraphRequest(Request):
    """Entities linked to start uids."""

    bound_fields: ClassVar[frozenset[str]] = frozenset({"depth"})
    needs: ClassVar[dict[str, str]] = {"starts": "graph needs at least one start uid"}

    starts: Annotated[list[Uid], BeforeValidator(listed)] = Field(
        ..., min_length=1, max_length=MAX_STARTS, description="uids of the entities to start from"
    )
    depth: int = Field(
        DEFAULT_DEPTH, ge=1, le=GRAPH_MAX_DEPTH, description=f"hops to follow (1–{GRAPH_MAX_DEPTH})"
    )
    labels: Annotated[list[Label], BeforeValidator(listed)] = Field(
        default_factory=list, description="follow only these edge labels (default: all 9)"
    )
    direction: Direction = Field(
        DEFAULT_DIRECTION, description="out: edges from the starts; in: edges into them; both"
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="how many entities to return")
    cursor: str | None = _cursor()

    @property
    def value(self) -> GraphQuery:
        return GraphQuery(
            starts=tuple(dict.fromkeys(self.starts)),
            depth=self.depth,
            labels=tuple(dict.fromkeys(self.labels)),
            direction=self.direction,
            k=self.k,
        )


class RelatedRequest(Request):
    """``get_related``: the neighbours of one entity."""

    bound_fields: ClassVar[frozenset[str]] = frozenset({"depth"})

    uid: Uid = Field(..., description="the entity's uid")
    labels: Annotated[list[Label], BeforeValidator(listed)] = Field(
        default_factory=list, description="follow only these edge labels (default: all 9)"
    )
    depth: int = Field(
        DEFAULT_DEPTH, ge=1, le=GRAPH_MAX_DEPTH, description=f"hops to follow (1–{GRAPH_MAX_DEPTH})"
    )
    direction: Direction = Field(DEFAULT_DIRECTION, description="edge direction")
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="how many entities to return")


class SqlRequest(Request):
    """Entities by their typed fields, ordered."""

    filters: Filtering
    order: OrderText = Field(
        "updated_at:desc",
        description=f"the order: {', '.join(ORDER_FIELDS)}, each optionally :asc or :desc",
    )
    k: int = Field(DEFAULT_K, ge=1, le=MAX_K, description="how many entities")
    cursor: str | None = _cursor()

    @field_validator("order", mode="before")
    @classmethod
    def _order(cls, value: Any) -> Any:
        if value is None or isinstance(value, Order):
            return str(Order.parse(value))
        if isinstance(value, str):
            return str(Order.parse(value))  # an unknown field or direction says which
        return value

    @property
    def order_value(self) -> Order:
        return Order.parse(self.order)


class AggregateRequest(Request):
    """A catalog metric by a dimension over the visible slice."""

    metric: MetricText = Field("count", description="what to compute")
    dimension: DimensionText | None = Field(
        None,
        description="group by this (a date trend lists every bucket in the range, zeros"
        " included); none for one total",
    )
    filters: Filtering
    _spec: AggregateSpec = PrivateAttr()

    @field_validator("dimension", mode="before")
    @classmethod
    def _blank(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="before")
    @classmethod
    def _catalog(cls, data: Any) -> Any:
        if isinstance(data, Mapping):  # the catalog's own sentences for a bad metric/dimension
            AggregateSpec.of(data.get("metric", "count"), data.get("dimension") or None)
        return data

    @model_validator(mode="after")
    def _typed(self) -> Self:
        self._spec = AggregateSpec.of(self.metric, self.dimension)
        return self

    @property
    def spec(self) -> AggregateSpec:
        return self._spec


class QueryGraphRequest(Request):
    """A bounded, read-only openCypher query."""

    text_fields: ClassVar[tuple[str, ...]] = ("params",)

    query: Text = Field(
        ...,
        min_length=1,
        max_length=QUERY_GRAPH_MAX_LENGTH,
        description="a read-only openCypher query: MATCH … WHERE … RETURN … ORDER BY … SKIP …"
        " LIMIT …; every value as a $parameter",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="the values of the query's $parameters, by name"
    )
    lenient: bool = Field(False, description="report every problem at once, with positions")


class ContentRequest(Request):
    """One entity with its chunks and its edges to visible entities."""

    uid: Uid = Field(..., description="the entity's uid")


class LearningPathRequest(ContentRequest):
    """``get_learning_path``: the ordered path an entity belongs to."""


class XrefRequest(Request):
    """``resolve_xref``: a uid, an href (with or without #anchor) or an exact title."""

    text_fields: ClassVar[tuple[str, ...]] = ("ref",)

    ref: Text = Field(
        ...,
        min_length=1,
        max_length=MAX_UID_LENGTH,
        description="a uid, an href (with or without #anchor) or an exact title",
    )


class FacetsRequest(Request):
    """``graph_facets``: the neighbours of a result set, counted by label and type."""

    needs: ClassVar[dict[str, str]] = {"uids": "graph_facets needs at least one uid"}
    uids: Annotated[list[Uid], BeforeValidator(listed)] = Field(
        ..., min_length=1, max_length=MAX_STARTS, description="the result set's uids"
    )
