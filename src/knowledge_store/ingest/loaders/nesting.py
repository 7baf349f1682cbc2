"""How deep an HTML document nests, estimated from its tags before anything parses it.

An HTML parser builds the tree on a stack of open elements, and some of its steps
look through that stack: lexbor took 6 s on 50,000 nested ``<div>`` elements and
would take minutes on 200,000 (the time grows with the square of the depth), and
every recursive walk of a tree (markdownify's) fails long before. A page that deep
is not a page: the HTML loader refuses it unread when this estimate passes its
bound (:data:`~knowledge_store.ingest.loaders.html.MAX_HTML_DEPTH`).

:func:`nesting_depth` is one pass over the tags. It follows the few rules of HTML
that matter, and on pages as people write them — elements closed, or left open in the
usual ways — it never answers less than the depth the parser builds
(``tests/ingest/test_html_nesting.py`` checks it against lexbor on generated pages).
It is an estimate, not a parser: tag soup made to fool it can nest deeper than it
says, which is why a page with many tags is parsed in a bounded worker as well
(:mod:`.html`). The rules:

- void elements (``<br>``, ``<img>`` …) hold nothing; ``<html>``, ``<head>`` and
  ``<body>`` never nest (a second one merges into the first);
- a ``<p>``, ``<li>``, ``<dt>``/``<dd>``, ``<td>``/``<th>``, ``<tr>`` or
  ``<option>`` closes one of its kind left open right above it (``<li>a<li>b``);
  a table part opens the parts it implies (``<table><td>`` holds a ``<tbody>`` and
  a ``<tr>``);
- an end tag closes the nearest open element of its name among the last
  :data:`_LOOKBACK` open ones, unless one HTML keeps open against it lies
  between (a ``<table>`` for ``</div>``, any block for ``</span>``); otherwise it
  is ignored (the parser may close more, and then the estimate stays above it);
- ``/>`` closes an element only in SVG or MathML content (and ``<svg/>``), and
  an HTML element such as ``<div>`` met there ends that content first;
- a formatting element left open (``<b>``) may be opened again by the parser in
  each later block until a table cell around it closes: the estimate adds every
  one it can't rule out;
- comments, doctypes and the text of ``<script>``, ``<style>``, ``<textarea>``,
  ``<title>``, ``<xmp>`` and ``<plaintext>`` (in HTML content) hold no elements.
"""

from __future__ import annotations

import re

__all__ = ["nesting_depth"]


def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


_TAG = re.compile(r"<(?:(/?)([A-Za-z][^\s/>]*)([^>]*)>|!--|[!?])")
_COMMENT_END = re.compile(r"--!?>")
_VOID = _names(
    "area base basefont bgsound br col embed frame hr image img input keygen link "
    "meta param source track wbr"
)
_MERGED = frozenset(("html", "head", "body"))
_FORMATTING = _names("a b big code em font i nobr s small strike strong tt u")
#: Elements that end the reach of the formatting opened inside them (a table cell …).
_MARKERS = frozenset(["applet", "object", "marquee", "template", "td", "th", "caption"])
#: What an opening tag closes when it sits right above it (a run, for ``<tr>``).
_CLOSES: dict[str, frozenset[str]] = {
    "p": frozenset({"p"}),
    "li": frozenset({"li"}),
    "dt": frozenset({"dt", "dd"}),
    "dd": frozenset({"dt", "dd"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
    "tr": frozenset({"td", "th", "tr"}),
    "option": frozenset({"option"}),
    "tbody": frozenset({"td", "th", "tr", "tbody", "thead", "tfoot"}),
    "thead": frozenset({"td", "th", "tr", "tbody", "thead", "tfoot"}),
    "tfoot": frozenset({"td", "th", "tr", "tbody", "thead", "tfoot"}),
}
_SECTIONS = frozenset(("tbody", "thead", "tfoot"))
#: The elements a table part implies when its parent is missing (``<table><td>``: a
#: ``<tbody>`` and a ``<tr>`` around the cell; ``<table><col>``: a ``<colgroup>``).
_IMPLIED: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    "tr": (("tbody", _SECTIONS),),
    "td": (("tbody", _SECTIONS | {"tr"}), ("tr", frozenset({"tr"}))),
    "th": (("tbody", _SECTIONS | {"tr"}), ("tr", frozenset({"tr"}))),
    "col": (("colgroup", frozenset({"colgroup"})),),
}
_RAW_TEXT = frozenset(["script", "style", "textarea", "title", "xmp", "plaintext"])
_RAW_END = {name: re.compile(rf"</{name}[\s/>]", re.IGNORECASE) for name in _RAW_TEXT}
_FOREIGN = frozenset(("svg", "math"))
#: Elements of SVG and of MathML whose content is HTML again.
_INTEGRATION = {
    "svg": frozenset(("foreignobject", "desc", "title")),
    "math": frozenset(("annotation-xml", "mi", "mo", "mn", "ms", "mtext")),
}
#: HTML elements that end SVG or MathML content when they appear in it.
_BREAKOUT = _names(
    "b big blockquote br center code dd div dl dt em embed h1 h2 h3 h4 h5 h6 hr i "
    "img li listing menu meta nobr ol p pre ruby s small span strong strike sub sup "
    "table tt u ul var"
)
_FONT_BREAKOUT = re.compile(r"(?:^|\s)(?:color|face|size)\s*=", re.IGNORECASE)
#: How far back an end tag looks for the element it closes (a bound on the work per tag).
_LOOKBACK = 64
#: What an end tag can't close past, by the rule HTML reads it with: table parts close
#: within their table; block ends (``</div>``) within a scope; formatting and every other
#: end tag not past any element HTML calls special (a ``</span>`` leaves an open ``<p>``).
_SCOPE = _names(
    "applet caption html table td th marquee object template select svg math "
    "foreignobject desc title mi mo mn ms mtext annotation-xml"
)
_TABLE_ENDS = frozenset(
    ["table", "tbody", "thead", "tfoot", "tr", "td", "th", "caption", "colgroup"]
)
_BLOCK_ENDS = _names(
    "address article aside blockquote button center details dialog dir div dl "
    "fieldset figcaption figure footer form header hgroup listing main menu nav ol "
    "pre search section summary ul li dd dt p h1 h2 h3 h4 h5 h6 applet marquee "
    "object select template"
)
_SPECIAL = (
    _SCOPE
    | _BLOCK_ENDS
    | _TABLE_ENDS
    | _names(
        "area base basefont bgsound body br col embed frame frameset head hr iframe img "
        "input keygen link meta noembed noframes noscript param plaintext script source "
        "style textarea track wbr xmp"
    )
)
_BARRIERS = {
    "table": frozenset({"table", "template", "html"}),
    "block": _SCOPE | {"ol", "ul", "button"},
    "other": _SPECIAL,
}


class _Tree:
    """The open elements as the estimate sees them, and the formatting elements a parser
    would open again (``<b>`` left open when a ``</div>`` closed it reopens in the next
    block: the estimate counts every one it can't rule out, over the open ones)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.spaces: list[str] = []  # per open element: html, svg or math
        self.foreign: list[bool] = []  # per open element: is its content SVG or MathML?
        self.formatting: list[str] = []
        self.marks: list[tuple[int, int]] = []  # (open marker's index, formatting before it)

    @property
    def depth(self) -> int:
        return len(self.names) + len(self.formatting)

    @property
    def in_foreign(self) -> bool:
        return bool(self.foreign) and self.foreign[-1]

    def push(self, name: str) -> None:
        space = self.spaces[-1] if self.in_foreign else name if name in _FOREIGN else "html"
        if name in _MARKERS and space == "html":
            self.marks.append((len(self.names), len(self.formatting)))
        self.names.append(name)
        self.spaces.append(space)
        self.foreign.append(space != "html" and name not in _INTEGRATION[space])

    def cut(self, index: int) -> None:
        """Close the elements from ``index`` up; a closed marker (a cell …) forgets the
        formatting opened inside it, as the parser does."""
        del self.names[index:], self.spaces[index:], self.foreign[index:]
        while self.marks and self.marks[-1][0] >= index:
            del self.formatting[self.marks.pop()[1] :]

    def closed_by(self, name: str) -> int | None:
        """Where the end tag ``name`` cuts the open elements (None: nowhere the estimate
        is sure of)."""
        if self.in_foreign:
            barrier: frozenset[str] | None = None  # SVG/MathML: through foreign elements only
        elif name in _TABLE_ENDS:
            barrier = _BARRIERS["table"]
        elif name in _BLOCK_ENDS:
            barrier = _BARRIERS["block"]
        else:
            barrier = _BARRIERS["other"]
        names = self.names
        for back in range(len(names) - 1, max(-1, len(names) - 1 - _LOOKBACK), -1):
            if names[back] == name:
                return back
            if (not self.foreign[back]) if barrier is None else names[back] in barrier:
                return None
        return None

    def break_out(self) -> None:
        """Close the SVG/MathML content the top of the tree is in (an HTML tag ends it)."""
        while self.in_foreign:
            self.cut(len(self.names) - 1)

    def end_tag(self, name: str) -> bool:
        """Read ``</name>``; True when it makes an element of its own (a stray ``</p>``)."""
        if name in ("p", "br"):  # they end SVG/MathML content, as <div> does
            self.break_out()
        if name in _FORMATTING and name in self.formatting:
            del self.formatting[len(self.formatting) - 1 - self.formatting[::-1].index(name)]
        back = self.closed_by(name)
        if back is not None:
            self.cut(back)
            return False
        return name in ("p", "br")

    def start_tag(self, name: str, attributes: str) -> bool:
        """Read ``<name …>``; True when it stays open (it can hold elements)."""
        self_closed = attributes.rstrip().endswith("/")
        if name in _BREAKOUT or (name == "font" and _FONT_BREAKOUT.search(attributes)):
            self.break_out()
        in_foreign = self.in_foreign
        if not in_foreign:
            closes = _CLOSES.get(name, ())
            while self.names and self.names[-1] in closes:
                self.cut(len(self.names) - 1)
            for implied, parents in _IMPLIED.get(name, ()):
                if not self.names or self.names[-1] not in parents:
                    self.push(implied)
            if name in _FORMATTING:
                if name == "a" and "a" in self.formatting:  # a link closes the one open
                    self.formatting.remove("a")
                self.formatting.append(name)
        if name in _VOID or (self_closed and (in_foreign or name in _FOREIGN)):
            return False
        self.push(name)
        return True


def nesting_depth(html: str, *, stop_above: int | None = None) -> int:
    """The deepest nesting of elements in ``html``, never below the parsed tree's.

    With ``stop_above``, the scan ends as soon as the depth passes it (the answer is
    then above ``stop_above``): a pathological document is told in one partial pass.
    """
    tree = _Tree()
    deepest = 0
    pos = 0
    size = len(html)
    while pos < size:
        match = _TAG.search(html, pos)
        if match is None:
            break
        pos = match.end()
        name = match.group(2)
        if name is None:  # a comment, a doctype, a processing instruction
            if match.group(0) == "<!--":
                end = _COMMENT_END.search(html, pos)
                pos = size if end is None else end.end()
            else:
                close = html.find(">", pos)
                pos = size if close < 0 else close + 1
            continue
        name = name.lower()
        if match.group(1):
            if tree.end_tag(name):
                deepest = max(deepest, tree.depth + 1)
            continue
        if name in _MERGED and not tree.in_foreign:
            continue
        raw = name in _RAW_TEXT and not tree.in_foreign
        opened = tree.start_tag(name, match.group(3))
        deepest = max(deepest, tree.depth + (0 if opened else 1))
        if stop_above is not None and deepest > stop_above:
            return deepest
        if raw:  # its text holds no elements
            if opened:
                tree.cut(len(tree.names) - 1)
            end = _RAW_END[name].search(html, pos)
            pos = size if end is None else end.end()
    return deepest
