"""The search page for people: ``/`` (search) and ``/entity/{uid}`` (one entity).

Server-rendered HTML over the same service layer as every other surface, a
stylesheet and a few lines of JavaScript served from the package (nothing
external is fetched; the Content-Security-Policy says so). The page shows
why each result is there — its rank in each list — its best evidence under
the matched heading, the superseded marker, and the neighbour facets of the
results; the entity page shows the content API's answer with its related
entities and its place in a learning path.

Identity: the same rules as the API. A browser can't send a bearer header on
a navigation, so the page also takes the token from the ``ks_token`` cookie
(HttpOnly, SameSite=Strict), which the sign-in form sets: it POSTs the token
to ``/signin`` — the token never travels in a URL, so it is never written to
an access log, a browser history or a Referer. A ``?token=…`` in a URL is
refused, not used. With ``--anonymous`` a visitor without a token is ``everyone``.
With ``--oidc-page-client`` the page also signs in with the IdP, and every form
that changes state carries a CSRF token (:mod:`.page_login`).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from knowledge_store.errors import KnowledgeStoreError, NotFound
from knowledge_store.model import ChunkLocation, Result, SearchAnswer
from knowledge_store.model.queries import QueryTerms, TextAnalysis
from knowledge_store.retrieval.paging import START, cursor_offset
from knowledge_store.retrieval.reader import StoreReader
from knowledge_store.surfaces.auth import AuthError, Caller, bearer_token
from knowledge_store.surfaces.body_html import body_html as render_body
from knowledge_store.surfaces.body_html import location_label, location_link
from knowledge_store.surfaces.operations import read_on
from knowledge_store.surfaces.page_login import check_csrf, csrf_field, csrf_token, set_csrf
from knowledge_store.surfaces.shapes import NOTHING_MATCHES
from knowledge_store.surfaces.snippets import inline_html, plain_text, snippet_html
from knowledge_store.surfaces.web import Service, service
from knowledge_store.surfaces.workers import is_heavy

__all__ = ["COOKIE", "VECTOR_FLOOR", "router"]

COOKIE = "ks_token"
_CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_STATIC = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}
#: Below this cosine similarity, a result that only the vector list found is marked as a
#: weak match. bench/vector_floor.py on the postgres-docs set (1,500 queries, MiniLM):
#: 3.0 % of the relevant best hits fall below 0.30 (5.8 % below 0.35, 9.8 % below 0.40);
#: queries about nothing in the store (kubernetes, sourdough) top out at 0.19–0.24.
VECTOR_FLOOR = 0.30
#: Related entities the entity page lists.
RELATED_ON_PAGE = 15

router = APIRouter(include_in_schema=False)
e = html.escape


# -- identity ----------------------------------------------------------------------------------------
async def _caller(request: Request, svc: Service) -> Caller:
    token = bearer_token(request.headers.get("authorization")) or request.cookies.get(COOKIE)
    return await svc.access.resolve(token or None)


def _page(title: str, body: str, *, status: int = 200, who: Caller | None = None) -> HTMLResponse:
    badge = ""
    if who is not None:
        badge = f'<span class="who" title="reads run as this identity">as {e(who.principal)}</span>'
        if not who.anonymous:
            badge += ' <a class="signout" href="/signout">sign out</a>'
    document = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · knowledge-store</title>
<link rel="stylesheet" href="/static/page.css">
<script src="/static/page.js" defer></script>
</head><body>
<header class="top"><a class="brand" href="/">knowledge-store</a>
<nav><a href="/openapi.json">API</a> <a href="/v1/capabilities">tools</a> {badge}</nav></header>
<main>{body}</main>
<footer>Permission-aware retrieval: vector · BM25 · graph · SQL, fused under your identity.</footer>
</body></html>"""
    return HTMLResponse(
        document,
        status_code=status,
        headers={"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff"},
    )


def _sign_in(request: Request, message: str, status: int) -> HTMLResponse:
    back = _local_target(request.url.path, _without_token(request))
    if request.url.path.startswith("/login"):
        back = "/"
    csrf = csrf_token(request)
    oidc = service(request).access.oidc
    idp = ""
    if oidc is not None and oidc.settings.page_client is not None:
        idp = (
            f'<p><a class="button" href="/login?{urlencode({"next": back})}">Sign in with'
            f' {e(oidc.settings.issuer)}</a></p><p class="muted">or with a token:</p>'
        )
    body = f"""<section class="card narrow"><h1>Sign in</h1>
<p class="muted">{e(message)}</p>{idp}
<form method="post" action="/signin" class="signin">{csrf_field(csrf)}
<input type="hidden" name="next" value="{e(back)}">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="off" required>
<button type="submit">Continue</button></form></section>"""
    response = _page("Sign in", body, status=status)
    set_csrf(response, request, csrf)
    return response


async def read_form(request: Request) -> dict[str, list[str]]:
    """A small urlencoded form (sign-in, sign-out): at most a few fields."""
    return parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=6)


def _without_token(request: Request) -> str:
    """The request's query string without any ``token`` parameter."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    return urlencode(kept)


def _local_target(path: str, query: str = "") -> str:
    """A path on this server to go back to (never another origin: no open redirect)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        path = "/"
    return path + (f"?{query}" if query else "")


def _refuse_token_in_url(request: Request) -> Response | None:
    """A ``?token=…`` is refused: a token in a URL ends up in logs, history and Referer."""
    if "token" not in request.query_params:
        return None
    return _sign_in(
        request,
        "A token in the address is not accepted (it would be written to logs and the browser"
        " history); sign in with this form instead.",
        400,
    )


@router.post("/signin")
async def sign_in(request: Request) -> Response:
    """The sign-in form: check the token, keep it in an HttpOnly SameSite=Strict cookie."""
    svc = service(request)
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host", ""):
        return _sign_in(request, "Sign in from this server's own page.", 403)
    form = await read_form(request)
    if not check_csrf(request, form):
        return _sign_in(request, "Sign in from this server's own page (the form expired).", 403)
    token = (form.get("token") or [""])[0].strip()
    path, _, query = (form.get("next") or ["/"])[0].partition("?")
    target = _local_target(path, query)
    try:
        await svc.access.resolve(token or None)
    except AuthError as exc:
        return _sign_in(request, exc.message, exc.status)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


# -- small renderers --------------------------------------------------------------------------------
def _entity_link(uid: str, title: str | None = None) -> str:
    shown = inline_html(title) if title else e(uid)
    return f'<a href="/entity/{quote(uid, safe="")}">{shown}</a>'


def _heading(heading: list[str], title: str) -> str:
    path = [h for h in heading if h and h != title]
    return " › ".join(inline_html(h) for h in path)


def _ranks(ranks: dict[str, int | None]) -> str:
    """A cell per list of the answer (the four, then any other list the search ran)."""
    cells = []
    for name, rank in ranks.items():
        if rank is None:
            cells.append(f'<span class="rank off" title="not in the {name} list">{name} —</span>')
        else:
            cells.append(
                f'<span class="rank on" title="rank in the {name} list">{name} #{rank}</span>'
            )
    return "".join(cells)


def _options(rows: list[tuple[str | None, int]], chosen: list[str]) -> str:
    out = ['<option value="">any</option>']
    for key, count in rows:
        if key is None:
            continue
        selected = " selected" if key in chosen else ""
        out.append(f'<option value="{e(key)}"{selected}>{e(key)} ({count})</option>')
    return "".join(out)


# -- results ------------------------------------------------------------------------------------------
def _vector_only_similarity(answer: SearchAnswer) -> dict[str, float]:
    """uid → best chunk cosine (the answer's ``similarity``), for the results that only
    the vector list found."""
    return {
        r.uid: r.similarity
        for r in answer.results
        if r.ranks.get("lexical") is None and r.similarity is not None
    }


def _place(href: str | None, location: ChunkLocation | None) -> str:
    """Where a passage is in its document (``page 3``), a link where the format allows."""
    if location is None:
        return ""
    place = location.to_dict()
    label = e(location_label(place))
    link = location_link(href, place)
    shown = f'<a href="{e(link)}" rel="noopener noreferrer">{label}</a>' if link else label
    return f'<span class="place">{shown}</span> · '


Marks = tuple[QueryTerms, TextAnalysis]


def _passage(heading: str, text: str, marks: Marks, place: str = "") -> str:
    heading = place + heading
    shown = f'<div class="heading">{heading}</div>' if heading else ""
    return shown + f'<p class="snippet">{snippet_html(text, *marks)}</p>'


def _result_card(n: int, r: Result, marks: Marks, similarity: float | None) -> str:
    """One result; ``similarity`` is set when only the vector list found it."""
    evidence = ""
    if r.evidence:
        first, *rest = r.evidence
        evidence = _passage(
            _heading(list(first.heading), r.title),
            first.text,
            marks,
            _place(r.href, first.location),
        )
        if rest:
            more = "".join(
                _passage(
                    _heading(list(ev.heading), r.title), ev.text, marks, _place(r.href, ev.location)
                )
                for ev in rest
            )
            evidence += (
                f"<details><summary>{len(rest)} more passage{'s' if len(rest) > 1 else ''}"
                f"</summary>{more}</details>"
            )
    superseded = (
        f'<span class="superseded">superseded by {_entity_link(r.superseded_by)}</span>'
        if r.superseded_by
        else ""
    )
    weak = similarity is not None and similarity < VECTOR_FLOOR
    marker = (
        f'<span class="weak" title="found by meaning only, cosine {similarity:.2f}'
        f' below {VECTOR_FLOOR:.2f}">weak match</span>'
        if weak and similarity is not None
        else ""
    )
    return f"""<li class="result{" weak-result" if weak else ""}"><div class="line"><span class="n">{n}</span>
<h3>{_entity_link(r.uid, r.title)}</h3><span class="type">{e(r.type)}</span>{superseded}{marker}</div>
<div class="uid">{e(r.uid)}</div>{evidence}
<div class="why"><span class="label">why it is here</span>{_ranks(dict(r.ranks))}
<span class="score">score {r.score:.4f}</span></div></li>"""


def _notice(q: str, answer: SearchAnswer, similarity: dict[str, float]) -> str:
    """What the page says above the results when the words matched nothing, or little did."""
    if not q or not answer.results:
        return ""
    if answer.words_matched is not False:
        return ""
    if similarity and all(s < VECTOR_FLOOR for s in similarity.values()):
        return (
            '<p class="notice">No result contains the words of your query, and none is close'
            " in meaning: these are only the least distant. Try other words.</p>"
        )
    return (
        '<p class="notice">No result contains the words of your query; these are the'
        " nearest in meaning.</p>"
    )


# -- the search page --------------------------------------------------------------------------------
#: The built-in filters the page offers (then each keyword facet the store declares).
_PAGE_FILTERS = ("type", "not_type", "source")


def _search_html(svc: Service, who: Caller, request: Request) -> str:
    params = request.query_params
    q = (params.get("q") or "").strip()[:500]
    cursor = (params.get("cursor") or "").strip()[:200] or None
    store = svc.store
    with store.reader(who.identity) as reader:  # one snapshot, one identity expansion
        declared = [f.name for f in reader.engine.declared_facets().values() if f.kind == "keyword"]
        chosen = {
            name: [v for v in params.getlist(name) if v][:10]
            for name in (*_PAGE_FILTERS, *declared)
        }
        return _search_body(
            store.is_empty, store.text_analysis, _reads(reader, svc, who), q, chosen, cursor
        )


Read = Callable[[str, dict[str, Any]], Any]


def _reads(reader: StoreReader, svc: Service, who: Caller) -> Read:
    """The page's reads on one reader, each through the operation table and recorded."""
    return lambda name, fields: read_on(reader, name, fields, store=svc.store, caller=who)


def _search_body(
    empty: bool,
    analysis: TextAnalysis,
    read: Read,
    q: str,
    chosen: dict[str, list[str]],
    cursor: str | None = None,
) -> str:
    """The search page's body from one reader: every read through the operation table. A
    search reads a page of a cursor (``retrieval/paging.py``): the "more" link the next."""
    filters = {name: values for name, values in chosen.items() if values}
    by = {"metric": "count"}
    types = read("aggregate", {**by, "dimension": "type"}).pairs()
    sources = read("aggregate", {**by, "dimension": "source"}).pairs()
    declared = "".join(
        f'<label>{e(name)} <select name="{e(name)}" class="autosubmit">'
        f"{_options(read('aggregate', {**by, 'dimension': name}).pairs(), values)}"
        "</select></label>"
        for name, values in chosen.items()
        if name not in _PAGE_FILTERS
    )
    form = f"""<form class="search" method="get" action="/" role="search">
<input id="q" name="q" type="search" value="{e(q)}" placeholder="Search the knowledge base (press / to focus)"
 autocomplete="off" autofocus aria-label="search">
<button type="submit">Search</button>
<div class="filters">
<label>type <select name="type" class="autosubmit">{_options(types, chosen["type"])}</select></label>
<label>not type <select name="not_type" class="autosubmit">{_options(types, chosen["not_type"])}</select></label>
<label>source <select name="source" class="autosubmit">{_options(sources, chosen["source"])}</select></label>
{declared}</div></form>"""
    if empty:
        return form + (
            '<p class="empty">The store is empty. Ingest content (<code>ks ingest PATH…</code>'
            " or POST /v1/admin/ingest) and it appears here — no restart needed.</p>"
        )
    if not q and not filters:
        recent = read("sql", {})
        items = "".join(
            f"<li>{_entity_link(h.uid, h.title)} <span class='type'>{e(h.type)}</span>"
            f" <span class='muted'>{e(h.updated_at or '')}</span></li>"
            for h in recent.hits
        )
        return (
            form
            + f'<section class="card"><h2>Recently updated</h2><ul class="plain">{items}</ul></section>'
        )
    asked = {"query": q, "filters": filters, "cursor": cursor or START}
    answer: SearchAnswer = read("search", asked)
    marks = (analysis.query_terms(q), analysis)
    similarity = _vector_only_similarity(answer)
    first = cursor_offset(cursor) + 1 if cursor else 1
    cards = [
        _result_card(n, r, marks, similarity.get(r.uid))
        for n, r in enumerate(answer.results, start=first)
    ]
    facets = ""
    if answer.results:
        uids = [r.uid for r in answer.results]
        found = read("graph_facets", {"uids": uids})
        by_label = "".join(
            f"<li>{e(label)} <b>{count}</b></li>" for label, count in found.by_label.items()
        )
        by_type = "".join(
            f'<li><a href="/?{e(urlencode({"q": q, "type": t}))}">{e(t)}</a> <b>{count}</b></li>'
            for t, count in found.by_type.items()
        )
        facets = f"""<aside class="facets card"><h2>Neighbours</h2>
<p class="muted">{found.neighbours} entities linked to these results</p>
<h3>by link</h3><ul class="plain">{by_label or "<li class='muted'>none</li>"}</ul>
<h3>by type</h3><ul class="plain">{by_type or "<li class='muted'>none</li>"}</ul></aside>"""
    more = ""
    if answer.next:
        link = urlencode([("q", q), *((n, v) for n, vs in filters.items() for v in vs)])
        more = (
            f'<p class="more"><a rel="next" href="/?{e(link)}&amp;cursor={quote(answer.next)}">'
            "more results</a></p>"
        )
    start = f' start="{first}"' if first > 1 else ""
    listing = (
        f'<ol class="results"{start}>{"".join(cards)}</ol>{more}'
        if cards
        else f'<p class="empty">{NOTHING_MATCHES}</p>'
    )
    summary = (
        f'<p class="muted summary">{len(answer.results)} results · fusion {e(answer.mode)}'
        f" · content root <code>{e(answer.content_root[:12])}</code></p>"
    )
    # the store's notes (a type nobody can read: "did you mean page?"), as the API gives them
    notes = "".join(f'<p class="notice">{e(note)}</p>' for note in answer.warnings)
    notice = notes + _notice(q, answer, similarity)
    return (
        form + f'<div class="columns"><section>{summary}{notice}{listing}</section>{facets}</div>'
    )


@router.api_route("/", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def search_page(request: Request) -> Response:
    svc = service(request)
    refused = _refuse_token_in_url(request)
    if refused is not None:
        return refused
    try:
        who = await _caller(request, svc)
    except AuthError as exc:
        return _sign_in(request, exc.message, exc.status)
    q = request.query_params.get("q") or ""
    try:
        asked = {"query": request.query_params.get("q", "")}
        heavy = is_heavy("search", {**asked, "cursor": request.query_params.get("cursor") or "*"})
        body = await svc.run(_search_html, svc, who, request, heavy=heavy)
    except KnowledgeStoreError as exc:
        body = f'<p class="error">{e(exc.message)}</p>'
        return _page("Search", body, status=exc.http_status, who=who)
    return _page(q or "Search", body, who=who)


# -- the entity page -----------------------------------------------------------------------------------
def _entity_html(svc: Service, who: Caller, uid: str) -> tuple[str, str]:
    with svc.store.reader(who.identity) as reader:  # one snapshot, one identity expansion
        return _entity_body(_reads(reader, svc, who), uid)


def _entity_body(read: Read, uid: str) -> tuple[str, str]:
    """The entity page from one reader: every read through the operation table."""
    content = read("content", {"uid": uid}).to_dict()
    entity = content["entity"]
    out_edges, in_edges = content["edges"]["out"], content["edges"]["in"]
    successor = next((x for x in out_edges if x["label"] == "supersededBy"), None)
    href = entity["href"] or ""
    link = (
        f'<a href="{e(href)}" rel="noopener noreferrer">{e(href)}</a>'
        if href.startswith(("http://", "https://"))
        else e(href)
    )
    facts = "".join(
        f"<dt>{name}</dt><dd>{value}</dd>"
        for name, value in (
            ("uid", f"<code>{e(entity['uid'])}</code>"),
            ("type", e(entity["type"])),
            ("source", e(entity["source"])),
            ("status", e(entity["status"])),
            ("created", e(entity["created_at"] or "—")),
            ("updated", e(entity["updated_at"] or "—")),
            ("href", link or "—"),
        )
    )
    if entity["attributes"]:
        attributes = json.dumps(entity["attributes"], ensure_ascii=False, indent=1)[:2000]
        facts += f"<dt>attributes</dt><dd><pre class='attrs'>{e(attributes)}</pre></dd>"
    banner = (
        f'<p class="superseded banner">Superseded by {_entity_link(successor["uid"], successor["title"])}'
        " — prefer the newer page.</p>"
        if successor
        else ""
    )
    body = entity["body"]
    first_line, _, rest = body.lstrip().partition("\n")
    if first_line.lstrip("#").strip() == entity["title"] and first_line.startswith("#"):
        body = rest  # the page title is already the h1
    targets = {x["href"]: x["uid"] for x in out_edges if x.get("href")}
    body_html = render_body(body, href=entity["href"], targets=targets)
    related = read("get_related", {"uid": uid, "k": RELATED_ON_PAGE})
    related_items = "".join(
        f"<li>{_entity_link(h.uid, h.title)} <span class='type'>{e(h.type)}</span>"
        f" <span class='muted'>{e(h.path[-1].label or '')}"
        f"{' · ' + str(h.hops) + ' hops' if h.hops > 1 else ''}</span></li>"
        for h in related.related
    )
    path_html = ""
    try:
        path = read("get_learning_path", {"uid": uid})
    except NotFound:
        path = None
    if path is not None and len(path.units) > 1:
        units = []
        for i, unit in enumerate(path.units):
            depth = f"depth-{min(unit.depth, 4)}"
            attrs = (
                f'class="{depth} current" aria-current="page"'
                if i == path.index
                else f'class="{depth}"'
            )
            units.append(f"<li {attrs}>{_entity_link(unit.uid, unit.title)}</li>")
        step = ""
        if path.index is not None:
            before = path.units[path.index - 1] if path.index > 0 else None
            after = path.units[path.index + 1] if path.index + 1 < len(path.units) else None
            step = (
                '<p class="steps">'
                + (f"← {_entity_link(before.uid, before.title)}" if before else "")
                + (f" · {_entity_link(after.uid, after.title)} →" if after else "")
                + "</p>"
            )
            where = f"step {path.index + 1} of {len(path.units)}"
        else:
            where = f"{len(path.units)} units"
        path_html = f"""<section class="card"><h2>Learning path</h2>
<p class="muted">{where}</p>{step}<ol class="path">{"".join(units)}</ol></section>"""
    edges = "".join(
        f"<li><span class='label'>{arrow} {e(x['label'])}</span> {_entity_link(x['uid'], x['title'])}</li>"
        for arrow, group in (("→", out_edges), ("←", in_edges))
        for x in group
    )
    page = f"""<article class="entity"><p class="crumbs"><a href="/">search</a></p>
<h1>{inline_html(entity["title"])} <span class="type">{e(entity["type"])}</span></h1>{banner}
<div class="columns"><section><div class="card body">{body_html}</div>
<p class="muted">{len(content["chunks"])} chunk{"" if len(content["chunks"]) == 1 else "s"} · content root <code>{e(content["content_root"][:12])}</code></p></section>
<aside><section class="card"><dl class="facts">{facts}</dl></section>{path_html}
<section class="card"><h2>Related</h2><ul class="plain">{related_items or "<li class='muted'>none you can read</li>"}</ul></section>
<section class="card"><h2>Links</h2><ul class="plain">{edges or "<li class='muted'>none</li>"}</ul></section>
</aside></div></article>"""
    return plain_text(entity["title"], keep_headings=True) or entity["title"], page


@router.api_route("/entity/{uid:path}", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def entity_page(uid: str, request: Request) -> Response:
    svc = service(request)
    refused = _refuse_token_in_url(request)
    if refused is not None:
        return refused
    try:
        who = await _caller(request, svc)
    except AuthError as exc:
        return _sign_in(request, exc.message, exc.status)
    try:
        title, body = await svc.run(_entity_html, svc, who, uid)
    except KnowledgeStoreError as exc:
        return _page(
            "Not found" if isinstance(exc, NotFound) else "Error",
            f'<section class="card narrow"><h1>Not here</h1><p>{e(exc.message)}</p>'
            '<p><a href="/">Back to search</a></p></section>',
            status=exc.http_status,
            who=who,
        )
    return _page(title, body, who=who)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    media = _STATIC.get(name)
    if media is None:
        raise NotFound(f"no static file {name!r}", file=name)
    text = files("knowledge_store.surfaces").joinpath("static", name).read_text(encoding="utf-8")
    return Response(text, media_type=media, headers={"Cache-Control": "max-age=300"})
