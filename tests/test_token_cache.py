"""The per-connection token cache on PostgreSQL: one INSERT per create, and no stale token.

Every change to a token that authentication reads is NOTIFYed by a trigger; a change made by
another session holds from the first request after PostgreSQL has delivered it. These tests
commit for real (transactional_db), as the cache is bypassed inside transactions.
"""

import importlib
import select
import subprocess
import sys

import pytest
from django.db import connection
from django.utils import timezone

from plants.models import ApiToken, Plant
from plants.services import token_issue
from tests.live import ROOT, create_many

trigger_migration = importlib.import_module("plants.migrations.0002_apitoken_change_trigger")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the token cache is PostgreSQL's"),
]


@pytest.fixture
def create(post_plant):
    """POST a new plant with the token and return the response."""
    ids = iter(range(1, 10**6))

    def post():
        return post_plant({"id": next(ids), "name": "Fern"})

    return post


def in_another_session(sql: str, params: list) -> None:
    """Run one statement on a connection of its own, as an operator's tool would."""
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute(sql, params)
    finally:
        other.close()


def wait_for_notification() -> None:
    """Until PostgreSQL has delivered something to this test's idle connection."""
    readable, _, _ = select.select([connection.connection.fileno()], [], [], 10)
    assert readable, "no notification arrived"


def statements(captured) -> list[str]:
    return [query["sql"].split()[0].upper() for query in captured.captured_queries]


def test_with_a_warm_token_cache_an_authenticated_create_is_one_insert(create, django_assert_num_queries):
    assert create().status_code == 200  # this connection LISTENs, reads the token and records its use

    with django_assert_num_queries(1) as captured:
        response = create()

    assert response.status_code == 200
    assert statements(captured) == ["INSERT"]


def test_token_revoked_in_this_session_is_refused_on_the_next_request(create, issued_token):
    assert create().status_code == 200

    ApiToken.objects.filter(pk=issued_token[0].pk).update(revoked_at=timezone.now())
    response = create()

    assert response.status_code == 401
    assert response.json() == {"error": 40101, "message": "The token has been revoked."}
    assert Plant.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("UPDATE plants_apitoken SET revoked_at = now() WHERE id = %s", "The token has been revoked."),
        ("UPDATE plants_apitoken SET expires_at = now() WHERE id = %s", "The token has expired."),
        ("DELETE FROM plants_apitoken WHERE id = %s", "The token is not valid."),
    ],
)
def test_token_changed_by_another_session_is_refused_once_postgres_delivers_the_change(
    create, issued_token, change, message
):
    assert create().status_code == 200

    in_another_session(change, [issued_token[0].pk])
    wait_for_notification()
    response = create()

    assert response.status_code == 401
    assert response.json() == {"error": 40101, "message": message}
    assert Plant.objects.count() == 1


def test_recording_last_use_keeps_the_token_cached(create, issued_token, django_assert_num_queries):
    assert create().status_code == 200

    in_another_session("UPDATE plants_apitoken SET last_used_at = now() WHERE id = %s", [issued_token[0].pk])
    readable, _, _ = select.select([connection.connection.fileno()], [], [], 0.5)

    assert not readable  # nothing announced
    with django_assert_num_queries(1):
        assert create().status_code == 200


def test_notification_on_an_idle_connection_does_not_get_it_replaced(create, django_assert_num_queries):
    other, _ = token_issue(name="other-client")
    assert create().status_code == 200
    session = connection.connection

    in_another_session("UPDATE plants_apitoken SET revoked_at = now() WHERE id = %s", [other.pk])
    wait_for_notification()

    assert connection.is_usable()
    with django_assert_num_queries(1):  # the test client's token is still cached
        assert create().status_code == 200
    assert connection.connection is session


def test_listening_connection_ended_by_the_server_is_replaced_before_use(create):
    assert create().status_code == 200
    session = connection.connection

    in_another_session("SELECT pg_terminate_backend(%s)", [session.info.backend_pid])
    wait_for_notification()

    assert not connection.is_usable()
    connection.close_if_unusable_or_obsolete()  # what Django does as a request starts
    assert create().status_code == 200
    assert connection.connection is not session


def test_a_new_connection_starts_with_an_empty_cache(create, issued_token):
    assert create().status_code == 200
    connection.close()
    # Revoked while this test had no connection to be told on: nothing may remember the token.
    in_another_session("UPDATE plants_apitoken SET revoked_at = now() WHERE id = %s", [issued_token[0].pk])

    assert create().status_code == 401


def test_connections_that_do_not_persist_look_the_token_up_every_time(create, django_assert_num_queries):
    # With CONN_MAX_AGE=0 each request has a connection of its own: a cache would only cost a LISTEN.
    max_age, connection.settings_dict["CONN_MAX_AGE"] = connection.settings_dict["CONN_MAX_AGE"], 0
    try:
        create()
        with django_assert_num_queries(2) as captured:
            assert create().status_code == 200
    finally:
        connection.settings_dict["CONN_MAX_AGE"] = max_age

    assert statements(captured) == ["SELECT", "INSERT"]


def test_without_the_change_trigger_tokens_are_not_cached(create, caplog, django_assert_num_queries):
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER plants_apitoken_changed ON plants_apitoken")
    connection.close()
    try:
        create()
        with django_assert_num_queries(2) as captured:
            assert create().status_code == 200
    finally:
        with connection.cursor() as cursor:
            cursor.execute(trigger_migration.CREATE_CHANGED_TRIGGER)

    assert statements(captured) == ["SELECT", "INSERT"]
    assert "API tokens are not cached: the token table has no change trigger; run migrate." in caplog.messages


def test_token_revoked_with_the_command_is_refused_by_every_gunicorn_worker(gunicorn, token):
    server = gunicorn(GUNICORN_WORKERS="2", GUNICORN_THREADS="4")
    warm = create_many(server.url, token, range(100), "warm")  # every server thread caches the token
    assert {status for status, _ in warm} == {200}

    subprocess.run(
        [sys.executable, "manage.py", "token", "revoke", "test-client"], cwd=ROOT, env=server.env, check=True
    )

    after = create_many(server.url, token, range(1000, 1100), "after")
    assert set(after) == {(401, '{"error":40101,"message":"The token has been revoked."}')}
    assert not Plant.objects.filter(id__gte=1000).exists()
