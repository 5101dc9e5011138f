"""`manage.py sqlite_backup DESTINATION`: an online copy of the SQLite database, consistent while the service writes."""

import os
import sqlite3
from contextlib import closing
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection


class Command(BaseCommand):
    help = (
        "Copy the SQLite database to DESTINATION while the service runs (SQLite's online backup): the copy "
        "holds every write committed before it began. PostgreSQL is backed up with pgBackRest instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("destination", type=Path, help="The copy's path; a file already there is replaced.")

    def handle(self, *args, destination: Path, **options):
        if connection.vendor != "sqlite":
            raise CommandError("The database is not SQLite: back PostgreSQL up with pgBackRest (docs/operating.md).")
        source = connection.settings_dict["NAME"]
        # Written beside the destination, then renamed over it: a copy cut short never looks complete.
        partial = destination.with_name(destination.name + ".partial")
        partial.unlink(missing_ok=True)
        # uri=True as Django opens it (the test database is a file: URI); SQLite's busy wait as the service's.
        timeout = connection.settings_dict["OPTIONS"].get("timeout", 5)
        with closing(sqlite3.connect(source, uri=True, timeout=timeout)) as database:
            with closing(sqlite3.connect(partial)) as copy:
                database.backup(copy)  # in one step: one consistent snapshot
        os.replace(partial, destination)
        self.stderr.write(f"Copied the database to {destination}.")
