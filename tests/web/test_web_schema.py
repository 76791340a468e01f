"""A property test from the OpenAPI schema: schemathesis generates requests for every route and
the server answers each with a documented status, never a server error."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed: "
                                                           "pip install 'gpuplan[test]'")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import positive_data_acceptance  # noqa: E402

from gpuplan.web import create_app  # noqa: E402

#: An error response: its line and, for a refused value, the data (InputError.to_dict).
ERROR_KEYS = {"error", "field", "value", "accepted", "fix"}

# the ASGI client sends "Host: testserver"; the loopback-only host check is tested elsewhere
schema = schemathesis.openapi.from_asgi("/api/openapi.json",
                                        create_app(allowed_hosts=["testserver"]))

#: Generated requests per route (bounded: the suite stays quick on two cores).
EXAMPLES = 25


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPLAN_BENCH_DB", str(tmp_path / "empty.sqlite"))
    response = case.call()
    assert response.status_code < 500 or response.status_code == 503, response.text
    assert response.headers["content-type"][0].startswith("application/json")
    body = response.json()
    if response.status_code >= 400:
        assert "error" in body and set(body) <= ERROR_KEYS and "\n" not in body["error"]
    # Every check but "a schema-valid request is accepted": the schema cannot state which
    # combinations the library refuses (a LoRA base without a rank, a batch that needs more than
    # the model's positions ...); those are answered 422 with one line, as asserted above.
    case.validate_response(response, excluded_checks=[positive_data_acceptance])
