"""Revocation and expiry: a token is refused from the first request that starts after it changed.

Every request reads its token's row, as DRF's TokenAuthentication and knox do, so this holds on
every worker of every server, with or without PgBouncer between them and PostgreSQL. A request
already past its token lookup when the change commits finishes as it began: that is the only
request a change can miss.
"""

import json
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from deploy.processes import ROOT
from plants.models import ApiToken, Plant
from tests.live import Load

REVOKED = {"error": 40101, "message": "The token has been revoked."}
EXPIRED = {"error": 40101, "message": "The token has expired."}


def in_another_session(sql: str, params: list) -> None:
    """Run one statement, committed, on a connection of its own, as an operator's tool would."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(sql, params)
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_token_revoked_while_its_lookup_runs_is_refused_from_the_next_request(post_plant, issued_token):
    token = issued_token[0]
    revoke = "UPDATE plants_apitoken SET revoked_at = %s WHERE id = %s"

    def revoke_right_after_the_token_lookup(execute, sql, params, many, context):
        # Commits in another session once this request has read its token, before its next
        # statement (the INSERT): the request is in flight, past its lookup.
        if looked_up.is_set() and not revoked.is_set():
            in_another_session(revoke, [timezone.now(), token.pk])
            revoked.set()
        if sql.lstrip().upper().startswith("SELECT") and "plants_apitoken" in sql:
            looked_up.set()
        return execute(sql, params, many, context)

    looked_up = threading.Event()
    revoked = threading.Event()
    assert post_plant({"id": 1, "name": "Fern"}).status_code == 200  # the connection is warm
    with connection.execute_wrapper(revoke_right_after_the_token_lookup):
        in_flight = post_plant({"id": 2, "name": "Fern"})
    after = [post_plant({"id": plant_id, "name": "Fern"}) for plant_id in (3, 4, 5)]

    assert revoked.is_set()
    assert in_flight.status_code == 200  # its lookup read the row before the revoke committed
    assert [(response.status_code, response.json()) for response in after] == [(401, REVOKED)] * 3
    assert sorted(Plant.objects.values_list("id", flat=True)) == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_token_changed_by_another_session_is_refused_on_the_next_request(post_plant, issued_token):
    assert post_plant({"id": 1, "name": "Fern"}).status_code == 200

    in_another_session("UPDATE plants_apitoken SET expires_at = %s WHERE id = %s", [timezone.now(), issued_token[0].pk])
    response = post_plant({"id": 2, "name": "Fern"})

    assert (response.status_code, response.json()) == (401, EXPIRED)
    assert list(Plant.objects.values_list("id", flat=True)) == [1]


@pytest.fixture(params=["postgresql", "pgbouncer"])
def server(request, production_unit):
    """A production unit (2 workers × 4 threads, persistent connections) on PostgreSQL, directly or through
    PgBouncer in transaction mode, with the default settings (prepared statements off: PgBouncer 1.18)."""
    if request.param == "postgresql":
        return production_unit(APP_PROCESSES="2", APP_THREADS="4")
    bouncer = request.getfixturevalue("pgbouncer")
    return production_unit(APP_PROCESSES="2", APP_THREADS="4", **bouncer.client_settings)


REVOKED_TEXT = '{"error":40101,"message":"The token has been revoked."}'
EXPIRED_TEXT = '{"error":40101,"message":"The token has expired."}'


def answers_sent(load: Load, *, before: float | None = None, after: float | None = None) -> list[tuple]:
    """(status, text) of the answers to requests sent before or after a moment (time.monotonic)."""
    return [
        (status, text)
        for _, status, _, text, sent in load.answers
        if (before is None or sent < before) and (after is None or sent >= after)
    ]


# The refused token's client, past .env.example's 60 failed authentications a minute from its
# address, gets the failed-authentication limit's 429 instead of the 401.
REFUSED = {401, 429}
LIMITED = (429, 42901)


def refusals(answers: list[tuple]) -> set[tuple]:
    """Each distinct refusal: (401, its whole text), or (429, its Error's code)."""
    return {(status, text if status != 429 else json.loads(text)["error"]) for status, text in answers}


def assert_stored_exactly_the_accepted_creates(load: Load) -> None:
    assert set(Plant.objects.values_list("id", flat=True)) == load.ids_with(200)


@pytest.mark.postgres
def test_token_revoked_under_load_is_refused_by_every_worker_from_the_next_request(server, token):
    with Load(f"{server.url}/plants", token) as load:
        load.wait_for(200)  # every worker thread has served the token
        subprocess.run(
            [sys.executable, "manage.py", "token", "revoke", "test-client"], cwd=ROOT, env=server.env, check=True
        )
        revoked_by = time.monotonic()  # the command has exited: its UPDATE has committed
        load.wait_for(len(load.answers) + 200)

    # Any other answer is shown whole (an unanswered request's text says why).
    assert [answer for answer in answers_sent(load, before=revoked_by) if answer[0] not in {200, *REFUSED}] == []
    after = answers_sent(load, after=revoked_by)
    assert len(after) >= 100
    # Refused from the commit on: 401 saying why, then the address's limit (it may be reached
    # before the command has even exited).
    assert refusals(after) <= {(401, REVOKED_TEXT), LIMITED}
    assert (401, REVOKED_TEXT) in refusals(answers_sent(load))
    assert_stored_exactly_the_accepted_creates(load)


@pytest.mark.postgres
def test_token_expiring_under_load_is_refused_by_every_worker_from_its_expiry(server, issued_token):
    token, secret = issued_token
    expires_at = timezone.now() + timedelta(seconds=2)
    expiry = time.monotonic() + 2  # the same moment on the clock Load stamps requests with
    ApiToken.objects.filter(pk=token.pk).update(expires_at=expires_at)

    with Load(f"{server.url}/plants", secret) as load:
        time.sleep(2)
        load.wait_for(len(load.answers) + 200)

    before = answers_sent(load, before=expiry - 0.5)
    assert before and [answer for answer in before if answer[0] != 200] == []
    after = answers_sent(load, after=expiry)
    assert len(after) >= 100
    assert refusals(after) <= {(401, EXPIRED_TEXT), LIMITED} and (401, EXPIRED_TEXT) in refusals(after)
    assert_stored_exactly_the_accepted_creates(load)
