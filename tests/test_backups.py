"""Backups as docs/operating.md has operators take and restore them: PostgreSQL restored to the moment
before a mistake with pgBackRest, and SQLite's online copy (manage.py sqlite_backup) taken under load."""

import json
import re
import shutil
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from deploy.processes import ROOT, wait_until
from plants.models import Plant
from tests.live import Load, MakeServe, create_many, live_unit, manage_on, request

# Where the PostgreSQL drill writes what it measured (make clean removes test-artifacts).
DRILL_FIGURES = ROOT / "test-artifacts" / "backup-drill.json"


def ids_in(database: Path) -> set[int]:
    with closing(sqlite3.connect(database)) as copy:
        return {row[0] for row in copy.execute("SELECT id FROM plants_plant")}


@pytest.mark.sqlite
@pytest.mark.django_db(transaction=True)
def test_sqlite_backup_copies_every_committed_plant_and_replaces_an_older_copy(tmp_path):
    destination = tmp_path / "plantstore.sqlite3"
    Plant.objects.create(id=1, name="Monstera")
    call_command("sqlite_backup", str(destination))
    Plant.objects.create(id=2, name="Fern")
    call_command("sqlite_backup", str(destination))

    assert ids_in(destination) == {1, 2}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["plantstore.sqlite3"]


def test_pgbackrest_conf_placeholders_are_the_ones_the_docs_name_and_each_has_its_comment():
    template = (ROOT / "deploy" / "pgbackrest.conf").read_text()
    placeholders = re.findall(r"@([A-Z_]+)@", template)
    setup = (ROOT / "docs" / "operating.md").read_text().split("**Set it up**", 1)[1].split("\n4. ", 1)[0]
    comments = "\n".join(line for line in template.splitlines() if line.startswith("#"))

    assert placeholders == ["REPOSITORY", "CIPHER_PASS", "LOG_PATH", "LOCK_PATH", "PGDATA", "PG_SOCKET", "PG_PORT"]
    assert re.findall(r"`@([A-Z_]+)@`", setup) == placeholders
    assert [name for name in placeholders if not re.search(rf"\b{name}\b", comments)] == []


def test_sqlite_backup_on_postgresql_refuses_and_names_pgbackrest(tmp_path, monkeypatch):
    monkeypatch.setattr(connection, "vendor", "postgresql")

    with pytest.raises(CommandError) as refused:
        call_command("sqlite_backup", str(tmp_path / "copy.sqlite3"))

    assert str(refused.value) == "The database is not SQLite: back PostgreSQL up with pgBackRest (docs/operating.md)."
    assert list(tmp_path.iterdir()) == []


@pytest.mark.live
@pytest.mark.own_database
def test_an_online_sqlite_backup_under_load_restored_holds_every_create_acknowledged_before_it_began(tmp_path):
    backup = tmp_path / "plantstore-backup.sqlite3"
    server = MakeServe(tmp_path).start()
    try:
        token = server.token()
        with Load(f"{server.url}/plants", token, clients=4) as load:
            load.wait_for(100)
            acknowledged_before = load.ids_with(200)
            server.manage("sqlite_backup", str(backup))
            load.wait_for(len(load.answers) + 100)  # creates go on being served after the copy
    finally:
        server.stop()
    acknowledged = load.ids_with(200)
    restored = ids_in(backup)
    # The restore docs/operating.md describes: stopped, the copy in place of the file, the journal gone.
    shutil.copyfile(backup, server.database)
    for leftover in ("-wal", "-shm", "-journal"):
        Path(f"{server.database}{leftover}").unlink(missing_ok=True)
    restarted = MakeServe(tmp_path).start()
    try:
        after = request(f"{restarted.url}/plants", {"id": 10**9, "name": "After the restore"}, token)
        stored = restarted.stored_ids()
    finally:
        restarted.stop()

    assert {status for _, status, *_ in load.answers} == {200}
    assert acknowledged_before <= restored <= acknowledged
    assert acknowledged - restored, "the creates acknowledged after the copy are not in it"
    assert (after[0], json.loads(after[2])) == (200, {"id": 10**9, "name": "After the restore"})
    assert stored == restored | {10**9}


def created(answers: list[tuple], ids) -> set[int]:
    assert [status for status, _ in answers] == [200] * len(answers), answers[:3]
    return set(ids)


@pytest.mark.live
@pytest.mark.own_database
def test_a_point_in_time_restore_brings_back_every_create_acknowledged_before_the_mistake_and_none_after(
    tmp_path, archived_postgres, record_property
):
    database = archived_postgres
    manage_on(database.url, "migrate", "--no-input")
    token = manage_on(database.url, "token", "issue", "drill")
    unit = live_unit(tmp_path, DATABASE_URL=database.url).start()
    try:
        url = unit.url
        before = created(create_many(url, token, range(1, 101), "before the full backup"), range(1, 101))
        database.pgbackrest("--type=full", "backup")
        before |= created(create_many(url, token, range(101, 201), "before the diff"), range(101, 201))
        database.pgbackrest("--type=diff", "backup")
        before |= created(create_many(url, token, range(201, 301), "after the backups"), range(201, 301))
        archive_push_s = database.seconds_to_archive_a_segment()
        # The moment to restore to, as the operator reads it just before the mistake.
        target = database.query("SELECT now()::text")[0][0]
        database.query("DELETE FROM plants_plant")
        created(create_many(url, token, range(1001, 1051), "after the mistake"), range(1001, 1051))
        manage_on(database.url, "token", "revoke", "drill")
        late_token = manage_on(database.url, "token", "issue", "issued-after-the-mistake")

        started = time.monotonic()
        restore_s, start_s = database.restore_to(target)
        restored = {row[0] for row in database.query("SELECT id FROM plants_plant")}
        # The unit was left running: it serves again by itself; the token is as it was at the target.
        wait_until(
            lambda: request(f"{url}/plants", {"id": 5000, "name": "after"}, token)[0] == 200, None, 30, "a create"
        )
        serving_s = time.monotonic() - started  # from the stop on
        late = request(f"{url}/plants", {"id": 5001, "name": "late"}, late_token)
    finally:
        unit.stop()

    # The recovery time and point docs/operating.md states, as measured on this machine.
    figures = {
        "restore_s": round(restore_s, 1),
        "start_and_replay_s": round(start_s, 1),
        "from_the_stop_until_a_create_is_served_s": round(serving_s, 1),
        "archive_push_of_one_segment_s": round(archive_push_s, 2),
        "acknowledged_creates_lost": len(before - restored),
    }
    for name, value in figures.items():
        record_property(name, value)
    DRILL_FIGURES.parent.mkdir(parents=True, exist_ok=True)
    DRILL_FIGURES.write_text(json.dumps(figures, indent=2) + "\n")
    assert restored == before
    assert (late[0], json.loads(late[2])) == (401, {"error": 40101, "message": "The token is not valid."})
