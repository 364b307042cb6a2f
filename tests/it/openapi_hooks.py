"""schemathesis hooks for tests/it/openapi.rs.

Long polls. A long poll (GET and POST /get/{topic}) waits for its `timeout`
(seconds, default 30, at most 300) when nothing is due, and in this run
mostly nothing is: each such request would hold the run for up to five
minutes. So a whole-number timeout above one second (206, +206 or 206.0,
in the query or the body), or none (or null), becomes one second. Everything else in those requests is sent as
generated, and a timeout that is not a whole number in range is left
alone: the server must still refuse it with 400.

Real messages. Generated ids name no message, so only the 404 answers of
the routes that take an id would be checked. The test pushes a few
messages and names them in DELAYQ_EXAMPLE_IDS; wherever the document's
example id is sent (the examples phase sends it, the others now and then),
one of them is sent instead, chosen by the operation so a run is
repeatable.
"""

import os
import re

import schemathesis

LONG_POLL = "/get/{topic}"
CAP = 1
EXAMPLE_ID = "382745980652486656"
REAL_IDS = [i for i in os.environ.get("DELAYQ_EXAMPLE_IDS", "").split(",") if i]


def _cap(value):
    if value is None:  # null in a body: the default, 30 s
        return CAP
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value > CAP:
        return CAP
    if isinstance(value, float) and value.is_integer() and value > CAP:
        return float(CAP)
    # The server reads a query value as Rust's u64 does: ASCII digits with
    # an optional leading "+" ("+30" waits 30 s).
    if isinstance(value, str) and re.fullmatch(r"\+?[0-9]+", value) and int(value) > CAP:
        return str(CAP)
    return value


def _real(value, operation):
    if not REAL_IDS:
        return value
    if isinstance(value, str) and value == EXAMPLE_ID:
        return REAL_IDS[sum(map(ord, operation)) % len(REAL_IDS)]
    if isinstance(value, list):
        return [_real(v, operation) for v in value]
    return value


@schemathesis.hook
def before_call(context, case, kwargs):
    operation = case.method.upper() + " " + case.operation.path
    for part in ("path_parameters", "query"):
        params = getattr(case, part)
        if isinstance(params, dict):
            for name in ("id", "target"):
                if name in params:
                    params[name] = _real(params[name], operation)
    if isinstance(case.body, dict):
        for name in ("ids", "ack"):
            if name in case.body:
                case.body[name] = _real(case.body[name], operation)
    if case.operation.path != LONG_POLL:
        return
    if case.method.upper() == "GET":
        if case.query is None:
            case.query = {}
        if isinstance(case.query, dict):
            case.query["timeout"] = _cap(case.query.get("timeout", CAP))
        return
    # POST takes it in the body, the query or both (the same in both).
    if isinstance(case.query, dict) and "timeout" in case.query:
        case.query["timeout"] = _cap(case.query["timeout"])
        if isinstance(case.body, dict) and "timeout" in case.body:
            case.body["timeout"] = _cap(case.body["timeout"])
    elif isinstance(case.body, dict):
        case.body["timeout"] = _cap(case.body.get("timeout", CAP))
