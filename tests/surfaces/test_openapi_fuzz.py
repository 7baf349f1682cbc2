"""schemathesis against the app's own OpenAPI spec, in-process, with bounded examples.

Every read route gets generated bodies, paths and queries — schema-valid and
schema-invalid: no input may make the server fail (5xx), every answer must
match the spec (status codes, content types, schemas), errors must be the
one error shape, and schema-invalid input must be refused with a 4xx. Not
checked: that every schema-valid input is accepted — semantic validation
(ISO dates, no NUL bytes, uids that exist) refuses some of them with 400/404
on purpose.
Administration routes are left out: they change the shared store, and their
rules have their own tests. (schemathesis' pytest loader trips over pytest 9,
so each operation's strategies are driven by hypothesis directly.)
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces import rest
from knowledge_store.surfaces.http import create_app
from tests.surfaces.serve_estate import BOB, TOKENS

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

ERROR_KEYS = {"code", "message", "details"}
READ_ROUTES = sorted(
    (method, route.path.replace(":path}", "}"))
    for route in rest.router.routes
    for method in getattr(route, "methods", ())
    if not route.path.startswith(("/v1/tools/", "/v1/admin/"))
)


@pytest.fixture(scope="module")
def api_schema(served: KnowledgeStore) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", create_app(served, tokens=TOKENS))


@pytest.mark.parametrize(("method", "path"), READ_ROUTES)
def test_every_read_route_honours_its_spec(api_schema: Any, method: str, path: str) -> None:
    operation = api_schema[path][method]
    modes = schemathesis.GenerationMode
    cases = st.one_of(operation.as_strategy(modes.POSITIVE), operation.as_strategy(modes.NEGATIVE))

    @given(case=cases)
    @settings(
        max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    def check(case: Any) -> None:
        response = case.call(headers=BOB)
        assert response.status_code < 500, response.text
        if response.status_code >= 400:
            body = response.json()
            assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
        case.validate_response(response, excluded_checks=[positive_data_acceptance])

    check()
