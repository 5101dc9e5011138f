"""Lock waits bounded by the database's own lock_timeout, which migrate sets: a create kept waiting for a
lock answers 503 after the bound less 1 s, directly and through a PgBouncer set up as its guides set it;
a role that cannot set it makes migrate fail with one line naming the statement."""

import configparser
import os
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from deploy.processes import ROOT
from plants import timeouts
from plants.models import ApiToken, Plant
from plants.services import token_issue
from tests.live import database_url, live_env, request
from tests.test_timeouts import BOUND_S, DATABASE_DOWN, MARGIN_S, timed

LOCK_TIMEOUT_S = timeouts.lock_timeout_ms(BOUND_S) / 1000


def direct_session(user: str | None = None) -> psycopg.Connection:
    """A session on the test database, straight to PostgreSQL, as its own user or `user`."""
    settings_dict = connection.settings_dict
    return psycopg.connect(
        dbname=settings_dict["NAME"],
        user=user or settings_dict["USER"],
        host=settings_dict["HOST"],
        port=settings_dict["PORT"] or 5432,
    )


@pytest.mark.parametrize("through_pgbouncer", [False, True], ids=["direct", "pgbouncer"])
def test_create_kept_waiting_for_a_lock_answers_503_after_the_database_s_lock_timeout(
    production_unit, pgbouncer, through_pgbouncer
):
    # PgBouncer with the usual setting, which refuses any other startup parameter (`options`).
    config = configparser.ConfigParser(inline_comment_prefixes=(";",))
    config.read(pgbouncer.config)
    assert config["pgbouncer"]["ignore_startup_parameters"] == "extra_float_digits"
    database = (
        pgbouncer.client_settings if through_pgbouncer else {"DATABASE_URL": database_url(connection.settings_dict)}
    )
    server = production_unit(**database, APP_PROCESSES="1", APP_THREADS="2")
    _, secret = token_issue(name="locks")
    create = lambda plant_id: request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret)  # noqa: E731
    before = create(1)

    with direct_session() as holder:  # a migration's lock, held past the bound
        holder.execute("LOCK TABLE plants_plant IN ACCESS EXCLUSIVE MODE")
        elapsed, (status, headers, text) = timed(create, 2)
        holder.rollback()
    after = create(3)

    assert before[0] == 200, server.log()
    assert (status, headers["Content-Type"], text) == (503, "application/json", DATABASE_DOWN)
    assert LOCK_TIMEOUT_S - 0.5 < elapsed < BOUND_S + MARGIN_S  # it waited for the lock, and no longer
    # PostgreSQL cancelled the wait itself (not PgBouncer's query_timeout, a second later).
    assert "canceling statement due to lock timeout" in server.log()
    assert after[0] == 200
    assert set(Plant.objects.values_list("id", flat=True)) == {1, 3}


def migrate_as(user: str) -> subprocess.CompletedProcess:
    """manage.py migrate as the operator's deploy step runs it, as `user`, on the test database."""
    url = database_url({**connection.settings_dict, "USER": user})
    command = [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"]
    return subprocess.run(command, cwd=ROOT, env=live_env(DATABASE_URL=url), capture_output=True, text=True)


@pytest.mark.postgres
def test_migrate_sets_the_database_s_lock_timeout_or_fails_in_one_line_naming_the_statement(transactional_db):
    role = f"plantstore_not_owner_{os.urandom(4).hex()}"
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            cursor.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
            cursor.execute(f'ALTER DATABASE "{name}" RESET lock_timeout')  # as before this version
            refused = migrate_as(role)
            with direct_session(user=role) as session:
                unset = session.execute("SHOW lock_timeout").fetchone()
            owners = migrate_as(connection.settings_dict["USER"])
            with direct_session(user=role) as session:
                set_by_the_owner = session.execute("SHOW lock_timeout").fetchone()
        finally:
            cursor.execute(f'ALTER DATABASE "{name}" SET lock_timeout = {timeouts.lock_timeout_ms(BOUND_S)}')
            cursor.execute(f'DROP OWNED BY "{role}"')
            cursor.execute(f'DROP ROLE "{role}"')

    assert refused.returncode == 1
    assert refused.stderr == (
        "CommandError: The database's lock_timeout must be 4000 ms (PLANTS_DATABASE_TIMEOUT_S less 1 s), and this "
        f"role cannot set it (must be owner of database {name}): as the database's owner, run "
        f'ALTER DATABASE "{name}" SET lock_timeout = 4000; then migrate again.\n'
    )
    assert unset == ("0",)
    assert (owners.returncode, owners.stderr) == (0, "")
    assert set_by_the_owner == ("4s",)


@pytest.mark.postgres
def test_a_request_whose_token_s_use_another_request_is_recording_goes_on_without_waiting_for_it(
    transactional_db, api_client
):
    # Another request of the same token has written its last_used_at and waits for its commit (a slow
    # synchronous standby): this one skips the bookkeeping rather than queue behind it until lock_timeout.
    api_token, secret = token_issue(name="busy")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    create = lambda body: api_client.generic("POST", "/plants", body, content_type="application/json", **headers)  # noqa: E731
    connection.close()  # the next session is a worker's: the database's lock_timeout, which migrate set
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == f"{LOCK_TIMEOUT_S:.0f}s"
    with direct_session() as holder:
        holder.execute("SELECT FROM plants_apitoken WHERE id = %s FOR UPDATE", [api_token.pk])
        busy = create('{"id": 1, "name": "Fern"}')
        holder.rollback()
    after = create('{"id": 2, "name": "Iris"}')

    assert (busy.status_code, busy.json()) == (200, {"id": 1, "name": "Fern"})
    assert (after.status_code, after.json()) == (200, {"id": 2, "name": "Iris"})
    # The skipped use is recorded by the next request.
    assert ApiToken.objects.get(pk=api_token.pk).last_used_at is not None
