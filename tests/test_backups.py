"""Backups as docs/operating.md has operators take and restore them: SQLite's online copy
(manage.py sqlite_backup) taken under load."""

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from plants.models import Plant
from tests.live import Load, MakeServe, request


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
