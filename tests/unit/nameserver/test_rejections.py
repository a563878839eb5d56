"""nameserver.metrics.Rejections: refused requests counted by API, gRPC status and class."""

from __future__ import annotations

from nameserver.metrics import Rejections, render


def test_refusals_are_counted_by_api_code_and_error() -> None:
    r = Rejections()
    r.count("grpc", "FAILED_PRECONDITION", "FailedPrecondition")
    r.count("grpc", "FAILED_PRECONDITION", "FailedPrecondition")
    r.count("remoting", "INVALID_ARGUMENT", "BadRequest")
    assert r.total() == 3
    text = render([r.metric({"node": "n0"})])
    assert text.splitlines() == [
        "# HELP metaledger_requests_rejected_total Client requests refused (answered with an "
        "error status), by API, gRPC status and error class; logged at DEBUG only.",
        "# TYPE metaledger_requests_rejected_total counter",
        'metaledger_requests_rejected_total{api="grpc",code="FAILED_PRECONDITION",'
        'error="FailedPrecondition",node="n0"} 2',
        'metaledger_requests_rejected_total{api="remoting",code="INVALID_ARGUMENT",'
        'error="BadRequest",node="n0"} 1',
    ]


def test_no_refusals_render_no_samples() -> None:
    assert render([Rejections().metric({"node": "n0"})]).count("\n") == 2
