"""A throwaway PostgreSQL server backed up as docs/operating.md tells operators to: its WAL archived by
pgBackRest (deploy/postgresql-archiving.conf) into a repository of its own (deploy/pgbackrest.conf)."""

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg

from deploy.processes import ROOT, render, wait_until
from localcluster.cluster import as_unprivileged_user
from localcluster.database import postgresql_bin

STANZA = "plantstore"


class ArchivedPostgres:
    """PostgreSQL on a unix socket in a temp folder that also holds its pgBackRest repository,
    configuration, logs and locks; servers and pgBackRest run as `postgres` when started as root."""

    def __init__(self):
        self.bin = postgresql_bin()
        self.work_dir = Path(tempfile.mkdtemp(prefix="plantstore-backups."))
        self.pgdata = self.work_dir / "data"
        self.port = 5432  # names the socket file; the server listens on no TCP port
        self.url = f"postgres://postgres@{quote(str(self.work_dir), safe='')}:{self.port}/plantstore"
        self.config = render(
            ROOT / "deploy" / "pgbackrest.conf",
            self.work_dir / "pgbackrest.conf",
            REPOSITORY=str(self.work_dir / "repository"),
            CIPHER_PASS=secrets.token_urlsafe(48),
            LOG_PATH=str(self.work_dir / "log"),
            LOCK_PATH=str(self.work_dir / "lock"),
            PGDATA=str(self.pgdata),
            PG_SOCKET=str(self.work_dir),
            PG_PORT=str(self.port),
        )
        self.config.chmod(0o600)  # it holds the repository's passphrase
        for folder in ("repository", "log", "lock"):
            (self.work_dir / folder).mkdir()
        if os.geteuid() == 0:
            for path in [self.work_dir, *self.work_dir.iterdir()]:
                shutil.chown(path, "postgres", "postgres")
        # The server's archive_command is the operators' (pgbackrest --stanza=plantstore archive-push
        # %p), which finds this configuration through pgBackRest's environment variable.
        self.env = {**os.environ, "PGBACKREST_CONFIG": str(self.config)}

    def create(self) -> "ArchivedPostgres":
        """initdb, archiving on, start, the plantstore database, the stanza."""
        self.run(self.bin / "initdb", "-D", self.pgdata, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = ''\nunix_socket_directories = '{self.work_dir}'\nport = {self.port}\n")
            conf.write((ROOT / "deploy" / "postgresql-archiving.conf").read_text())
        self.start()
        self.run(self.bin / "createdb", "-h", self.work_dir, "-p", str(self.port), "-U", "postgres", "plantstore")
        self.pgbackrest("stanza-create")
        self.pgbackrest("check")  # archiving works: a WAL segment reached the repository
        return self

    def pgbackrest(self, *arguments: str) -> str:
        return self.run("pgbackrest", f"--config={self.config}", f"--stanza={STANZA}", *arguments)

    def run(self, *command) -> str:
        done = subprocess.run(
            [str(part) for part in command], env=self.env, cwd=self.work_dir, capture_output=True, text=True,
            timeout=300, **as_unprivileged_user(),
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"{[str(part) for part in command[:3]]} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self) -> None:
        try:
            self.run(self.bin / "pg_ctl", "-D", self.pgdata, "-l", self.work_dir / "server.log", "-w", "start")
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{self.log()}") from None

    def stop(self) -> None:
        """A clean stop: PostgreSQL switches to a new WAL segment and archives the last one first."""
        self.run(self.bin / "pg_ctl", "-D", self.pgdata, "-m", "fast", "-w", "stop")

    def restore_to(self, target: str) -> tuple[float, float]:
        """Stop, restore over the data folder (--delta: only the files that differ) the newest backup
        before `target`, and replay the archived WAL to it; start, and wait until it takes writes.
        The seconds the restore took, and the start (the replay)."""
        self.stop()
        started = time.monotonic()
        self.pgbackrest("--delta", "--type=time", f"--target={target}", "--target-action=promote", "restore")
        restored = time.monotonic()
        self.start()
        wait_until(lambda: not self.query("SELECT pg_is_in_recovery()")[0][0], None, 120, "the end of recovery")
        return restored - started, time.monotonic() - restored

    def query(self, sql: str) -> list[tuple]:
        with psycopg.connect(host=str(self.work_dir), port=self.port, user="postgres", dbname="plantstore") as conn:
            conn.autocommit = True
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def seconds_to_archive_a_segment(self) -> float:
        """How long the segment being written takes to reach the repository once switched: what a
        commit waits, beyond archive_timeout, to be safe from the loss of the host."""
        segment = self.query("SELECT pg_walfile_name(pg_current_wal_lsn())")[0][0]
        started = time.monotonic()
        self.query("SELECT pg_switch_wal()")
        archived = "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver"
        wait_until(lambda: self.query(archived)[0][0] >= segment, None, 60, f"WAL segment {segment} archived")
        return time.monotonic() - started

    def log(self) -> str:
        path = self.work_dir / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def remove(self) -> None:
        subprocess.run(
            [str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-m", "immediate", "stop"],
            capture_output=True, **as_unprivileged_user(),
        )  # fmt: skip
        shutil.rmtree(self.work_dir, ignore_errors=True)
