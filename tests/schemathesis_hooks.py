"""schemathesis hooks for `scripts/contract_test.py`: spread generated ids so valid bodies are new plants."""

import secrets

import schemathesis

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@schemathesis.hook
def before_call(context, case, kwargs):
    # Generated ids cluster on small values (0, 1, ...), which would make most valid creates
    # duplicates of earlier ones. A valid id is swapped for a random one just before the call;
    # an invalid id stays invalid. `secrets`, not `random`: Hypothesis reseeds `random`.
    body = case.body
    if isinstance(body, dict) and type(body.get("id")) is int and INT64_MIN <= body["id"] <= INT64_MAX:
        body["id"] = 1 + secrets.randbelow(INT64_MAX)
