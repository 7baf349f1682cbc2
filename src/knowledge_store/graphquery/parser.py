"""Text → typed AST (:mod:`.nodes`), with errors a person or a model can act on.

``parse(text)`` raises the first problem as a typed error (code, sentence,
``line``/``column`` in its details). ``parse_lenient(text)`` returns
``(query or None, every problem found)``: all syntax errors lark can recover
from, or — when the text parses — every bound the validator finds broken.

Write and schema keywords (CREATE, MERGE, SET, DELETE, …) are not in the
grammar; a scan before the parse recognises them anyway, so that the answer
says "read-only" instead of "unexpected token".
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from knowledge_store.errors import InvalidRequest
from knowledge_store.graphquery import nodes as n
from knowledge_store.graphquery.problems import QueryError, raise_errors
from knowledge_store.graphquery.validator import validate
from knowledge_store.model import QUERY_GRAPH_MAX_LENGTH

__all__ = ["MAX_NESTING", "MAX_QUERY_CHARS", "parse", "parse_lenient", "syntax_errors"]

#: Longer texts are refused before parsing (a query is a sentence, not a document).
MAX_QUERY_CHARS = QUERY_GRAPH_MAX_LENGTH
#: Nesting of WHERE expressions (parentheses, NOT) a query may have.
MAX_NESTING = 32
_MAX_SYNTAX_ERRORS = 20

#: Words that would write or administer in Cypher/GQL: recognised, always refused.
_WRITE_WORDS = {
    "CREATE",
    "MERGE",
    "SET",
    "DELETE",
    "DETACH",
    "REMOVE",
    "INSERT",
    "CALL",
    "LOAD",
    "FOREACH",
    "UNWIND",
    "DROP",
    "ALTER",
    "GRANT",
    "REVOKE",
    "DENY",
    "RENAME",
    "TRUNCATE",
}
#: Read clauses of openCypher that this subset does not have.
_UNSUPPORTED_WORDS = {"WITH", "UNION", "EXISTS", "SHOW", "USE", "YIELD", "CASE"}

_SCAN = re.compile(
    r"""'(?:[^'\\\n]|\\.)*'?|"(?:[^"\\\n]|\\.)*"?|`[^`\n]*`?|//[^\n]*|/\*.*?(?:\*/|\Z)"""
    r"""|[A-Za-z_][A-Za-z0-9_]*|\S""",
    re.DOTALL,
)

_READABLE = {
    "LPAR": "(",
    "RPAR": ")",
    "LSQB": "[",
    "RSQB": "]",
    "LBRACE": "{",
    "RBRACE": "}",
    "COMMA": ",",
    "COLON": ":",
    "DOT": ".",
    "VBAR": "|",
    "SEMICOLON": ";",
    "DASH": "-",
    "LT": "<",
    "GT": ">",
    "EQ": "=",
    "NE": "<>",
    "LE": "<=",
    "GE": ">=",
    "STAR": "*",
    "DOTDOT": "..",
    "NAME": "a name",
    "QUOTED_NAME": "a `name`",
    "PARAM": "a $parameter",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "$END": "the end of the query",
    "<END-OF-FILE>": "the end of the query",
}


@cache
def _lark() -> Lark:
    grammar = resources.files("knowledge_store.graphquery").joinpath("grammar.lark").read_text()
    return Lark(
        grammar,
        parser="lalr",
        propagate_positions=True,
        maybe_placeholders=False,
    )


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def keyword_errors(text: str) -> list[QueryError]:
    """Write/schema keywords and unsupported clauses, found outside strings and comments."""
    errors: list[QueryError] = []
    tokens = [(m.group(0), m.start()) for m in _SCAN.finditer(text)]
    for i, (tok, offset) in enumerate(tokens):
        word = tok.upper()
        if not (tok[0].isalpha() or tok[0] == "_"):
            continue
        before = tokens[i - 1][0] if i else ""
        after = tokens[i + 1][0] if i + 1 < len(tokens) else ""
        if before in {".", ":", "$", "|"} or after == ":":
            continue  # a property, a label, a parameter or a map key — not a clause
        line, column = _line_col(text, offset)
        if word in _WRITE_WORDS:
            if word == "DELETE" and before.upper() == "DETACH":
                continue  # reported once, as DETACH DELETE
            shown = word
            if word == "LOAD" and after.upper() == "CSV":
                shown = "LOAD CSV"
            elif word == "DETACH" and after.upper() == "DELETE":
                shown = "DETACH DELETE"
            errors.append(
                QueryError(
                    "invalid_request",
                    f"query_graph is read-only: `{shown}` is not allowed; read with"
                    " MATCH … RETURN (writes go through ingest, delete and acl)",
                    line,
                    column,
                    {"keyword": shown},
                )
            )
        elif word in _UNSUPPORTED_WORDS and not (
            word == "WITH" and before.upper() in {"STARTS", "ENDS"}
        ):
            errors.append(
                QueryError(
                    "invalid_request",
                    f"`{word}` is not supported by query_graph; write one query of"
                    " MATCH / OPTIONAL MATCH clauses, WHERE, RETURN, ORDER BY, SKIP and LIMIT",
                    line,
                    column,
                    {"keyword": word},
                )
            )
    return errors


def _expected(names: set[str] | frozenset[str] | Any) -> str:
    shown: list[str] = []
    for name in sorted(names or ()):
        if name in _READABLE:
            label = _READABLE[name]
        elif name.startswith("__ANON"):
            continue
        else:
            label = name.upper()
        if label not in shown:
            shown.append(label)
    return ", ".join(shown[:14]) + (", …" if len(shown) > 14 else "")


def _syntax_error(exc: UnexpectedInput, text: str) -> QueryError:
    line = int(getattr(exc, "line", 0) or 0) or None
    column = int(getattr(exc, "column", 0) or 0) or None
    if isinstance(exc, UnexpectedCharacters):
        at = exc.pos_in_stream or 0
        char = text[at] if at < len(text) else ""
        if char in "'\"":
            message = f"unclosed string starting with {char}"
        else:
            message = f"unexpected character {char!r}"
        return QueryError("invalid_request", message, line, column)
    if isinstance(exc, UnexpectedToken | UnexpectedEOF):
        token = getattr(exc, "token", None)
        expected = set(getattr(exc, "expected", ()) or ())
        if token is None or token.type == "$END":
            if line is None:
                line, column = _line_col(text, len(text))
            if "RETURN" in expected:
                msg = "the query ends before its RETURN clause; end it with RETURN …"
            else:
                msg = f"the query ends too early; expected {_expected(expected)}"
            return QueryError("invalid_request", msg, line, column)
        value = str(token)
        if expected and expected <= {"MATCH", "OPTIONAL"}:
            msg = f"a query starts with MATCH or OPTIONAL MATCH, not {value!r}"
        else:
            msg = f"unexpected {value!r}; expected {_expected(expected)}"
        return QueryError("invalid_request", msg, line, column)
    return QueryError("invalid_request", f"cannot parse the query: {exc}", line, column)


def _check_text(text: str) -> QueryError | None:
    if not isinstance(text, str):
        return QueryError("invalid_request", "the query must be a string")
    if not text.strip():
        return QueryError("invalid_request", "the query is empty; write MATCH … RETURN …")
    if len(text) > MAX_QUERY_CHARS:
        return QueryError(
            "bound_exceeded",
            f"the query has {len(text)} characters; the maximum is {MAX_QUERY_CHARS}",
        )
    if "\x00" in text:
        return QueryError("invalid_request", "the query contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return QueryError("invalid_request", "the query is not valid Unicode text")
    return None


def syntax_errors(text: str) -> tuple[Tree[Token] | None, list[QueryError]]:
    """Parse with error recovery: the tree (None if anything was wrong) and every error."""
    bad = _check_text(text)
    if bad is not None:
        return None, [bad]
    errors = keyword_errors(text)
    found: list[QueryError] = []

    stuck: list[Any] = [None]

    def on_error(exc: UnexpectedInput) -> bool:
        # Recovery skips the bad token; while the parser stays in the same state,
        # the next tokens fail for the same reason: report the first one only.
        state = frozenset(getattr(exc, "expected", ()) or ())
        if not state or state != stuck[0]:
            found.append(_syntax_error(exc, text))
        stuck[0] = state
        return len(found) < _MAX_SYNTAX_ERRORS

    tree: Tree[Token] | None
    try:
        tree = _lark().parse(text, on_error=on_error)
    except UnexpectedInput as exc:
        if frozenset(getattr(exc, "expected", ()) or ()) != stuck[0] or not found:
            found.append(_syntax_error(exc, text))
        tree = None
    except (RecursionError, ValueError) as exc:  # pathological nesting
        found.append(QueryError("invalid_request", f"cannot parse the query: {exc}"))
        tree = None
    if errors:
        # A write keyword also breaks the parse: report it as read-only, and only
        # the syntax errors that come before it.
        first = (errors[0].line or 0, errors[0].column or 0)
        earlier = [e for e in found if (e.line or 0, e.column or 0) < first]
        return None, _dedupe(earlier + errors)
    return (None if found else tree), _dedupe(found)


def _dedupe(errors: list[QueryError]) -> list[QueryError]:
    seen: set[tuple[str, int | None, int | None, str]] = set()
    out: list[QueryError] = []
    for e in errors:
        key = (e.code, e.line, e.column, e.message)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def parse(text: str) -> n.Query:
    """Parse and validate ``text`` (without its parameters); raise the first problem."""
    query, errors = _parse_only(text, strict=True)
    if query is None:
        raise_errors(errors, all_of_them=False)
        raise InvalidRequest("cannot parse the query")  # unreachable: errors is never empty
    raise_errors(validate(query), all_of_them=False)
    return query


def parse_lenient(text: str) -> tuple[n.Query | None, list[QueryError]]:
    """``(query, errors)``: every problem at once, each with its line and column.

    The query is None when the text does not parse; when it parses, the
    validator's problems are all listed (the query is returned with them).
    """
    query, errors = _parse_only(text, strict=False)
    if query is None:
        return None, errors
    return query, validate(query)


def _parse_only(text: str, *, strict: bool) -> tuple[n.Query | None, list[QueryError]]:
    if strict:
        bad = _check_text(text)
        if bad is not None:
            return None, [bad]
        errors = keyword_errors(text)
        if errors:
            return None, errors[:1]
        try:
            tree = _lark().parse(text)
        except UnexpectedInput as exc:
            return None, [_syntax_error(exc, text)]
        except (RecursionError, ValueError) as exc:
            return None, [QueryError("invalid_request", f"cannot parse the query: {exc}")]
    else:
        maybe_tree, errors = syntax_errors(text)
        if maybe_tree is None or errors:
            return None, errors or [QueryError("invalid_request", "cannot parse the query")]
        tree = maybe_tree
    try:
        return _Builder(text).query(tree), []
    except _TooDeep as deep:
        return None, [
            QueryError(
                "bound_exceeded",
                f"the WHERE condition nests more than {MAX_NESTING} levels deep"
                " (parentheses and NOT); write it flatter",
                deep.pos.line,
                deep.pos.column,
                {"maximum": MAX_NESTING},
            )
        ]


# -- tree → AST ------------------------------------------------------------------------------------


def _pos(item: Tree[Token] | Token, fallback: n.Pos | None = None) -> n.Pos:
    if isinstance(item, Token):
        return n.Pos(int(item.line or 1), int(item.column or 1))
    meta = item.meta
    if not getattr(meta, "empty", True):
        return n.Pos(int(meta.line), int(meta.column))
    for child in item.children:
        if isinstance(child, Tree | Token):
            return _pos(child, fallback)
    return fallback or n.Pos(1, 1)


def _trees(tree: Tree[Token], name: str | None = None) -> list[Tree[Token]]:
    return [c for c in tree.children if isinstance(c, Tree) and (name is None or c.data == name)]


def _tokens(tree: Tree[Token], kind: str | None = None) -> list[Token]:
    return [c for c in tree.children if isinstance(c, Token) and (kind is None or c.type == kind)]


def _symbol(tree: Tree[Token]) -> str:
    token = tree.children[0]
    assert isinstance(token, Token)
    text = str(token)
    return text[1:-1] if token.type == "QUOTED_NAME" else text


class _TooDeep(Exception):
    def __init__(self, pos: n.Pos) -> None:
        self.pos = pos


class _Builder:
    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def query(self, tree: Tree[Token]) -> n.Query:
        if tree.data == "start":
            tree = _trees(tree)[0]
        clauses: list[n.MatchClause] = []
        distinct = False
        items: tuple[n.ReturnItem, ...] = ()
        order: tuple[n.SortItem, ...] = ()
        skip: n.Param | int | n.Literal | None = None
        limit: n.Param | int | n.Literal | None = None
        skip_pos: n.Pos | None = None
        limit_pos: n.Pos | None = None
        for child in _trees(tree):
            if child.data in {"match_clause", "optional_match_clause"}:
                clauses.append(self.match(child))
            elif child.data == "return_clause":
                distinct = bool(_tokens(child, "DISTINCT"))
                items = tuple(self.return_item(t) for t in _trees(child, "return_item"))
            elif child.data == "order_clause":
                order = tuple(self.sort_item(t) for t in _trees(child, "sort_item"))
            elif child.data == "skip_clause":
                skip, skip_pos = self.count_value(child), _pos(_trees(child)[0])
            elif child.data == "limit_clause":
                limit, limit_pos = self.count_value(child), _pos(_trees(child)[0])
        return n.Query(
            tuple(clauses), distinct, items, order, skip, limit, _pos(tree), skip_pos, limit_pos
        )

    def match(self, tree: Tree[Token]) -> n.MatchClause:
        patterns = tuple(self.path(p) for p in _trees(_trees(tree, "pattern_list")[0], "path"))
        wheres = _trees(tree, "where_clause")
        where = self.expr(_trees(wheres[0])[0]) if wheres else None
        return n.MatchClause(tree.data == "optional_match_clause", patterns, where, _pos(tree))

    def path(self, tree: Tree[Token]) -> n.PathPattern:
        nodes = tuple(self.node(t) for t in _trees(tree, "node"))
        rels = tuple(self.rel(t) for t in _trees(tree, "rel"))
        return n.PathPattern(nodes, rels, _pos(tree))

    def node(self, tree: Tree[Token]) -> n.NodePattern:
        var = _trees(tree, "node_variable")
        labels = _trees(tree, "node_labels")
        props = _trees(tree, "properties")
        return n.NodePattern(
            var=_symbol(_trees(var[0])[0]) if var else None,
            labels=tuple(_symbol(s) for s in _trees(labels[0], "symbol")) if labels else (),
            props=self.props(props[0]) if props else (),
            pos=_pos(tree),
        )

    def props(self, tree: Tree[Token]) -> tuple[tuple[str, n.Operand, n.Pos], ...]:
        out: list[tuple[str, n.Operand, n.Pos]] = []
        for pair in _trees(tree, "prop_pair"):
            key, value = _trees(pair)
            out.append((_symbol(key), self.operand(value), _pos(key)))
        return tuple(out)

    def rel(self, tree: Tree[Token]) -> n.RelPattern:
        left = bool(_tokens(tree, "LT"))
        right = bool(_tokens(tree, "GT"))
        direction: n.Direction = (
            "out" if right and not left else "in" if left and not right else "both"
        )
        detail = _trees(tree, "rel_detail")
        var: str | None = None
        labels: tuple[str, ...] = ()
        length: n.VarLength | None = None
        props: tuple[tuple[str, n.Operand, n.Pos], ...] = ()
        if detail:
            d = detail[0]
            if v := _trees(d, "rel_variable"):
                var = _symbol(_trees(v[0])[0])
            if t := _trees(d, "rel_types"):
                labels = tuple(_symbol(s) for s in _trees(t[0], "symbol"))
            if vl := _trees(d, "var_length"):
                length = self.var_length(vl[0])
            if p := _trees(d, "properties"):
                props = self.props(p[0])
        return n.RelPattern(var, labels, direction, length, props, _pos(tree))

    def var_length(self, tree: Tree[Token]) -> n.VarLength:
        pos = _pos(tree)
        bounds = _trees(tree)
        if not bounds:
            return n.VarLength(None, None, False, pos)
        b = bounds[0]
        if b.data == "exact_length":
            d = int(_tokens(b, "INT")[0])
            return n.VarLength(d, d, True, pos)
        lo: int | None = None
        hi: int | None = None
        seen_dots = False
        for tok in _tokens(b):
            if tok.type == "DOTDOT":
                seen_dots = True
            elif tok.type == "INT":
                if seen_dots:
                    hi = int(tok)
                else:
                    lo = int(tok)
        return n.VarLength(lo, hi, False, pos)

    # -- expressions ----------------------------------------------------------------------------
    def expr(self, tree: Tree[Token] | Token) -> n.Expr:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise _TooDeep(_pos(tree))
            return self._expr(tree)
        finally:
            self.depth -= 1

    def _expr(self, tree: Tree[Token] | Token) -> n.Expr:
        if isinstance(tree, Token):
            return self.operand(tree)
        kind = tree.data
        pos = _pos(tree)
        if kind == "or_expr":
            return n.Or(tuple(self.expr(t) for t in _trees(tree)), pos)
        if kind == "and_expr":
            return n.And(tuple(self.expr(t) for t in _trees(tree)), pos)
        if kind == "not_expr":
            return n.Not(self.expr(_trees(tree)[0]), pos)
        if kind == "group":
            return self.expr(_trees(tree)[0])
        if kind == "bare":
            return self.operand(_child(tree))
        if kind == "is_null" or kind == "is_not_null":
            return n.IsNull(self.operand(_child(tree)), kind == "is_not_null", pos)
        operands = [c for c in tree.children if isinstance(c, Tree) and c.data != "comp_op"]
        if kind == "param" or not operands:
            return self.operand(tree)
        left, right = self.operand(operands[0]), self.operand(operands[1])
        op: n.CompareOp
        if kind == "compare":
            tok = _tokens(_trees(tree, "comp_op")[0])[0]
            op = {"EQ": "=", "NE": "<>", "LT": "<", "GT": ">", "LE": "<=", "GE": ">="}[tok.type]  # type: ignore[assignment]
        elif kind == "in_list":
            op = "IN"
        elif kind == "starts_with":
            op = "STARTS WITH"
        elif kind == "ends_with":
            op = "ENDS WITH"
        elif kind == "contains":
            op = "CONTAINS"
        else:
            return self.operand(tree)
        return n.Compare(op, left, right, pos)

    def operand(self, tree: Tree[Token] | Token) -> n.Operand:
        if isinstance(tree, Token):
            if tree.type == "PARAM":
                return n.Param(str(tree)[1:], _pos(tree))
            return n.Literal(str(tree), _pos(tree))
        kind = tree.data
        pos = _pos(tree)
        if kind == "property":
            var, prop = _trees(tree)
            return n.Property(_symbol(_trees(var)[0]), _symbol(prop), pos)
        if kind == "var_ref":
            return n.VarRef(_symbol(_trees(_trees(tree)[0])[0]), pos)
        if kind == "variable":
            return n.VarRef(_symbol(_trees(tree)[0]), pos)
        if kind == "param":
            return n.Param(str(_tokens(tree)[0])[1:], pos)
        if kind == "function":
            name = _symbol(_trees(tree, "symbol")[0])
            args: list[n.Operand] = []
            for child in tree.children[1:]:
                if isinstance(child, Tree):
                    args.append(self.operand(child))
                elif child.type == "STAR":
                    args.append(n.Star(_pos(child)))
            return n.FuncCall(name.lower(), tuple(args), bool(_tokens(tree, "DISTINCT")), pos)
        if kind in {"string_literal", "number_literal", "bool_literal", "null_literal"}:
            return n.Literal(str(_tokens(tree)[0]), pos)
        if kind == "list_literal":
            return n.Literal(self._source(tree, pos), pos)
        if kind == "symbol":
            return n.VarRef(_symbol(tree), pos)
        raise InvalidRequest(f"unexpected {kind} at line {pos.line}, column {pos.column}")

    def _source(self, tree: Tree[Token], pos: n.Pos) -> str:
        meta = tree.meta
        if not getattr(meta, "empty", True):
            return self.text[meta.start_pos : meta.end_pos]
        return "[…]"

    # -- projection --------------------------------------------------------------------------------
    def return_item(self, tree: Tree[Token]) -> n.ReturnItem:
        children = _trees(tree)
        expr = self.operand(children[0])
        alias = _symbol(children[1]) if len(children) > 1 else None
        return n.ReturnItem(expr, alias, render(expr), _pos(tree))

    def sort_item(self, tree: Tree[Token]) -> n.SortItem:
        expr = self.operand(_trees(tree)[0])
        return n.SortItem(expr, bool(_tokens(tree, "DESC")), _pos(tree))

    def count_value(self, tree: Tree[Token]) -> n.Param | int | n.Literal:
        value = _trees(tree)[0]
        if value.data == "int_value":
            return int(_tokens(value)[0])
        operand = self.operand(value)
        assert isinstance(operand, n.Param | n.Literal)
        return operand


def _child(tree: Tree[Token]) -> Tree[Token] | Token:
    for c in tree.children:
        if isinstance(c, Tree):
            return c
    token = tree.children[0]
    assert isinstance(token, Token)
    return token


def render(expr: n.Operand) -> str:
    """An operand as a column name: ``b.title``, ``count(*)``, ``type(r)``."""
    if isinstance(expr, n.Property):
        return f"{expr.var}.{expr.name}"
    if isinstance(expr, n.VarRef):
        return expr.name
    if isinstance(expr, n.Param):
        return f"${expr.name}"
    if isinstance(expr, n.Literal):
        return expr.text
    if isinstance(expr, n.Star):
        return "*"
    inner = ", ".join(render(a) for a in expr.args)
    return f"{expr.name}({'DISTINCT ' if expr.distinct else ''}{inner})"
