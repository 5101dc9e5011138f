"""deploy/systemd's units under systemd as PID 1 (tests/systemd_host.py), installed as
docs/deploying.md says, on the host's PostgreSQL from Debian and on SQLite, the shell blocks of the
operator's pages run as written there (tests/operator_docs.py): what an operator sees of their
start, releases (deploy/plantstore-release), rollback, tokens, backups, stop, journal, sandbox and
restarts. Prometheus wired to such a host: tests/test_systemd_host_alerts.py."""

import hashlib
import json
import re
import secrets
import time

import pytest

from deploy.processes import wait_until
from tests.installed_unit import (
    CLIENT,
    EDGE_FILE,
    ENV_FILE,
    MANAGE,
    RATE,
    SQLITE_URL,
)
from tests.live import Browser, request
from tests.operator_docs import CHECKOUT, PAGES, skip_reasons

# One host per module; the host is no database of the run's: once, in the SQLite pass, as the container tests.
pytestmark = [pytest.mark.live, pytest.mark.container]
PSQL = "cd / && runuser -u postgres -- psql -d plantstore -Atc"


def test_installed_as_the_docs_say_it_starts_once_ready_on_the_failover_pair_s_url(deployed):
    tables = deployed.host.run("cd / && runuser -u postgres -- psql -At -d plantstore -c '\\dt'").stdout
    created = deployed.create(1, deployed.token)
    anonymous = deployed.create(2, "")
    other_host = request(f"{deployed.url}/healthz", proxy="127.0.0.1", Host="127.0.0.1")
    pinned = deployed.host.run(
        "stat -c '%n %U %a' /etc/plantstore/edge.env /etc/plantstore/slots /etc/plantstore/slots/a.env"
        " && readlink /opt/plantstore-slots/a /opt/plantstore"
    ).stdout.splitlines()

    assert deployed.active() == {
        "plantstore-nginx": {"ActiveState": "active", "SubState": "running"},
        "plantstore-app@a": {"ActiveState": "active", "SubState": "running"},
    }
    assert (
        deployed.host.run("systemctl is-enabled plantstore.target plantstore-nginx plantstore-app@a").stdout.split()
        == ["enabled"] * 3
    )
    # migrate, through deploy/plantstore-manage, on the failover pair's URL: its tables are in PostgreSQL.
    assert {"plants_plant", "plants_apitoken"} <= {line.split("|")[1] for line in tables.splitlines()}
    assert (created[0], json.loads(created[2]), created[1]["Server"]) == (200, {"id": 1, "name": "Monstera"}, "nginx")
    assert (anonymous[0], other_host[0], json.loads(other_host[2])["error"]) == (401, 400, 40000)
    # The service user cannot change what nginx or a slot is given; slot a runs the release's folder.
    assert pinned[:3] == [
        "/etc/plantstore/edge.env root 644",
        "/etc/plantstore/slots root 700",
        "/etc/plantstore/slots/a.env root 600",
    ]
    assert pinned[3] == pinned[4] and pinned[3].startswith("/opt/plantstore-releases/2"), pinned
    assert deployed.host.failed_units == []
    # .env.example's: no statement prepared, which a PgBouncer put in front later could lose.
    assert deployed.app_environment("DJANGO_DB_PREPARED_STATEMENTS") == "0"


def test_a_release_in_a_folder_of_its_own_then_a_rollback_under_load_fails_no_request(deployed, docs):
    """docs/deploying.md's release block again, as written: a new release in a folder of its own, then
    the rollback's block under load: every app worker is replaced by one of the previous release's,
    and no request fails."""
    first = deployed.host.run("readlink /opt/plantstore").stdout.strip()
    docs.run("deploying.md", "release=/opt/plantstore-releases/$(date")
    release = deployed.host.run("readlink /opt/plantstore").stdout.strip()
    previous = deployed.host.run("readlink /opt/plantstore.previous").stdout.strip()
    old_workers, old_slot, since = deployed.app_workers(), deployed.slot(), deployed.now()
    with deployed.load(deployed.token, first_id=10_000, clients=4, limit=3000, timeout=30) as load:
        load.wait_for(50)
        docs.run("deploying.md", "/opt/plantstore.previous/deploy/plantstore-release")
        answered_after = len(load.answers)
        load.wait_for(answered_after + 300)
    new_workers, new_slot = deployed.app_workers(), deployed.slot()
    runs_from = deployed.host.run(f"readlink /proc/{deployed.app_main()}/cwd").stdout.strip()
    old_state = deployed.show(f"plantstore-app@{old_slot}", "ActiveState", "UnitFileState")

    assert (release.startswith("/opt/plantstore-releases/2"), release != first, previous) == (True, True, first)
    assert len(load.answers) >= answered_after + 300
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert (len(old_workers), len(new_workers), old_workers & new_workers, runs_from) == (2, 2, set(), previous)
    assert set(deployed.processes()).isdisjoint(old_workers)
    assert (new_slot != old_slot, old_state) == (True, {"ActiveState": "inactive", "UnitFileState": "disabled"})
    assert f"edge: nginx sends to /run/plantstore/{new_slot}/app.sock" in deployed.journal(since)


def test_migrate_by_a_role_that_cannot_set_lock_timeout_applies_nothing_and_flush_never_sets_it(deployed):
    """deploy/plantstore-manage's migrate on a database its role does not own fails in one line before
    any migration applies; owned, migrate sets the database's lock_timeout, and flush does not."""
    url = next(
        line for line in deployed.host.run(f"cat {ENV_FILE}").stdout.splitlines() if line.startswith("DATABASE_URL=")
    )
    other = "/root/not-owned.env"
    deployed.host.run(
        f"install -m 600 /dev/null {other} && echo '{url.replace('/plantstore?', '/not_owned?')}' >{other}"
        f" && cd / && runuser -u postgres -- createdb not_owned && {PSQL.replace('plantstore', 'not_owned', 1)}"
        " 'GRANT ALL ON SCHEMA public TO plantstore'"
    )
    setting = f"{PSQL} \"SELECT setconfig FROM pg_db_role_setting JOIN pg_database d ON d.oid = setdatabase WHERE datname = 'not_owned'\""
    try:
        refused = deployed.host.run(f"{MANAGE} --env-file {other} migrate --no-input", check=False)
        tables = deployed.host.run(f"{PSQL.replace('plantstore', 'not_owned', 1)} '\\dt'", check=False).stdout
        owned = deployed.host.run(
            f"{PSQL} 'ALTER DATABASE not_owned OWNER TO plantstore' && {MANAGE} --env-file {other} migrate --no-input -v 0"
            f" && {setting}"
        ).stdout
        deployed.host.run(f"{PSQL} 'ALTER DATABASE not_owned RESET lock_timeout'")
        deployed.host.run(f"{MANAGE} --env-file {other} flush --no-input")
        after_flush = deployed.host.run(setting).stdout
    finally:
        deployed.host.run(f"rm -f {other} && cd / && runuser -u postgres -- dropdb --force not_owned", check=False)

    assert refused.returncode == 1
    assert refused.stderr.startswith("CommandError: The database's lock_timeout must be 4000 ms"), refused.stderr
    assert (tables, owned.splitlines()[-1], after_flush) == ("", "{lock_timeout=4000}", "")


def test_a_token_issued_tried_revoked_and_refused_as_operating_md_shows_through_the_tls_proxy(deployed, docs):
    """docs/operating.md's token block, its output as the page shows it: 400 (the token accepted, the
    empty body refused), then the revoked token's 401 body; then its list."""
    docs.run("operating.md", "token=$(deploy/plantstore-manage token issue billing-service", "token list")
    listed = deployed.host.run(f"{MANAGE} token list").stdout.splitlines()

    assert [line.split()[-1] for line in listed if line.startswith("billing-service ")] == ["revoked"]
    assert deployed.create(3, deployed.token)[0] == 200  # another name's token is not touched


def digest(key: str) -> str:
    """A key's SHA-256: what an assertion on a key shows, never the key."""
    return hashlib.sha256(key.encode()).hexdigest()


def test_the_secret_key_rotated_as_written_logs_the_admins_out_and_api_tokens_serve_on(deployed, docs):
    """docs/operating.md's first admin user, made as written, logs in with the password its file
    holds, which no process's command line on the host shows; then its rotation, as written: the
    release puts the new key in force; the admin's session from before no longer opens the admin, and
    the API's token still creates."""
    docs.run("operating.md", "createsuperuser --no-input --username operator")
    password = deployed.host.run("sed -n 's/^DJANGO_SUPERUSER_PASSWORD=//p' /root/plantstore-admin.env").stdout.strip()
    file_mode = deployed.host.run("stat -c %a /root/plantstore-admin.env").stdout
    journal = deployed.host.run("journalctl -o verbose --no-pager", check=False).stdout
    admin = Browser(deployed.host.port, "127.0.0.1", proxy="127.0.0.1")  # podman forwards from 127.0.0.1 alone
    logged_in = admin.log_in("operator", password)[0]
    before = admin.send("GET", "/admin/")[0], digest(deployed.app_environment("DJANGO_SECRET_KEY"))
    docs.run("operating.md", "key=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')")
    in_file = next(
        line.split("=", 1)[1] for line in deployed.host.run(f"cat {ENV_FILE}").stdout.splitlines()
        if line.startswith("DJANGO_SECRET_KEY=")
    )  # fmt: skip
    after = admin.send("GET", "/admin/"), digest(deployed.app_environment("DJANGO_SECRET_KEY"))
    mode = deployed.host.run(f"stat -c '%a %U' {ENV_FILE}").stdout.strip()

    assert (len(password), file_mode) == (24, "600\n")
    assert password not in journal  # the transient unit's description names its command line
    assert (logged_in, before[0]) == (302, 200)
    assert (after[0][0], after[0][1]["Location"]) == (302, "/admin/login/?next=/admin/")
    assert (after[1] != before[1], after[1] == digest(in_file), mode) == (True, True, "600 root")
    assert deployed.create(4, deployed.token)[0] == 200


def test_a_503_s_edge_line_and_app_line_are_found_in_the_journal_as_written(deployed, docs):
    """docs/operating.md's "Why was a request refused?": with the database stopped, a client's create
    is a 503, and the page's block finds its edge line, its request id and the app's line."""
    request_id, since = secrets.token_hex(16), deployed.now()
    deployed.host.run("systemctl stop 'postgresql@*'")  # the cluster's unit: postgresql's returns before it stops
    try:
        refused = deployed.create(5, deployed.token, X_Request_Id=request_id)
        deployed.wait_for_line(since, f'"request_id": "{request_id}", "duration_s"')  # the edge's, after the app's
        docs.run("operating.md", "request_id=$(journalctl -u 'plantstore-*' -o cat --since -15min")
        lines = [line for line in deployed.journal(since) if request_id in line]
    finally:
        deployed.host.run("systemctl start postgresql")

    assert (refused[0], json.loads(refused[2])["error"]) == (503, 50300)
    assert any(line.startswith('{"edge": true') and '"cause": "app"' in line for line in lines), lines
    assert any("INFO plants.requests" in line and '"status": 503' in line for line in lines), lines
    assert deployed.wait_healthy() == 200


def test_pgbackrest_set_up_backed_up_and_restored_to_a_moment_as_written(deployed, docs):
    """docs/operating.md's pgBackRest on the database host, as written: set up, the stanza and a full
    backup; a plant created, the moment written down, a plant created after it and the first
    deleted by mistake; the restore to the moment brings the first back, and not the second."""
    docs.run("operating.md", "apt-get install --no-install-recommends pgbackrest", "stanza=plantstore stanza-create")
    # pgBackRest restores from a backup that stopped before the moment, its stop time in whole
    # seconds: the moment comes a second after it, as an operator's moment comes long after.
    info = deployed.host.run("runuser -u postgres -- pgbackrest --stanza=plantstore --output=json info").stdout
    stopped = json.loads(info)[0]["backup"][-1]["timestamp"]["stop"]
    wait_until(lambda: float(deployed.now()) > stopped + 1, None, 10, "a second past the backup's stop")
    kept = deployed.create(900_001, deployed.token)
    docs.run("operating.md", "psql -Atc 'SELECT now()' >/root/restore-moment")
    lost = deployed.create(900_002, deployed.token)
    deployed.host.run(f"{PSQL} 'DELETE FROM plants_plant WHERE id = 900001'")
    docs.run("operating.md", "moment=$(cat /root/restore-moment)")
    restored = deployed.host.run(f"{PSQL} 'SELECT id FROM plants_plant WHERE id > 900000'").stdout.split()
    backups = deployed.host.run("runuser -u postgres -- pgbackrest --stanza=plantstore info").stdout
    deployed.wait_healthy()
    after = deployed.create(900_003, deployed.token)

    assert (kept[0], lost[0], restored, after[0]) == (200, 200, ["900001"], 200)
    assert (backups.count("full backup: "), backups.count("diff backup: ")) == (1, 1), backups


def test_postgresql_s_restart_drop_in_as_written_is_in_force(deployed, docs):
    """docs/operating.md's drop-in for PostgreSQL's clusters (Full disk), its output as the page shows it."""
    docs.run("operating.md", "mkdir -p /etc/systemd/system/postgresql@.service.d")
    main_pid = deployed.host.run("systemctl show -p MainPID --value 'postgresql@*'").stdout.strip()
    deployed.host.run(f"kill -KILL {main_pid}")  # the postmaster dies: systemd starts it again in 5 s

    assert deployed.wait_healthy(timeout=60) == 200
    assert deployed.host.run("systemctl show -p NRestarts --value 'postgresql@*'").stdout.strip() == "1"


def test_the_journal_holds_the_app_s_request_lines_and_nginx_s(deployed):
    token, since, request_id = deployed.token, deployed.now(), secrets.token_hex(16)
    created = deployed.create(30_000, token, X_Request_Id=request_id)
    traced = request(f"{deployed.url}/plants", method="TRACE", proxy="127.0.0.1")  # nginx answers it alone
    app_line = deployed.wait_for_line(since, request_id)
    nginx_lines = deployed.wait_for_line(since, '"TRACE"', "-t nginx")

    assert (created[0], traced[0]) == (200, 405)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO plants\.requests "
        rf'\{{"method": "POST", "path": "/plants", "status": 200, "duration_ms": [\d.]+, "token": "{CLIENT}", '
        rf'"client": "127\.0\.0\.1", "request_id": "{request_id}", "trace_id": "[0-9a-f]{{32}}", "span_id": "[0-9a-f]{{16}}"\}}',
        app_line,
    ), app_line
    assert re.fullmatch(
        r'\{"edge": true, "method": "TRACE", "path": "/plants", "status": 405, "cause": "edge", "upstream_status": "", '
        # nginx refuses TRACE before it reads X-Forwarded-For: the client is the connection's, podman's gateway.
        r'"client": "[\d.]+", "request_id": "[0-9a-f]{32}", "duration_s": [\d.]+\}',
        nginx_lines,
    ), nginx_lines


def test_their_sandbox_is_in_force_inside_them(deployed):
    main = deployed.app_main()
    # Every process of the services' cgroups: its user, capabilities, no_new_privs, seccomp mode.
    status = deployed.host.run(
        "for pid in $(grep -lE '/plantstore-(nginx|app@[ab])\\.service$' /proc/[0-9]*/cgroup | cut -d/ -f3); do"
        " echo $(ps -o user:20= -p $pid) $(grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/$pid/status | cut -f2);"
        " done"
    ).stdout.splitlines()
    # In the slot's mount namespace, as root: ProtectSystem=strict's read-only file system, not
    # a permission, refuses the write; its state directory takes one; its /tmp is its own.
    inside = deployed.host.run(
        f"nsenter -t {main} -m sh -c 'touch /opt/plantstore/probe /etc/probe; touch /var/lib/plantstore/probe "
        "&& rm /var/lib/plantstore/probe && echo state directory written; touch /tmp/sandbox-probe && ls /tmp'",
        check=False,
    )
    host_tmp = deployed.host.run("ls /tmp").stdout.split()

    assert len(status) >= 5, status  # nginx's master and worker, Granian and its 2 workers
    # nginx's processes as plantstore-edge, the app's as plantstore.
    assert set(status) == {
        f"{user} 0000000000000000 0000000000000000 1 2" for user in ("plantstore", "plantstore-edge")
    }
    assert inside.stderr.splitlines() == [
        "touch: cannot touch '/opt/plantstore/probe': Read-only file system",
        "touch: cannot touch '/etc/probe': Read-only file system",
    ]
    assert (inside.stdout.splitlines(), "sandbox-probe" in host_tmp) == (
        ["state directory written", "sandbox-probe"],
        False,
    )


SECRETS = ("DJANGO_SECRET_KEY", "DATABASE_URL", "PLANTS_METRICS_TOKEN")


def test_nginx_runs_as_its_own_user_holds_no_secret_and_reaches_the_slot_s_socket_through_its_group(deployed):
    """From inside the host: nginx's master and workers hold none of the app's secrets in their
    environment, nginx's user reads neither the settings file, a slot's copy nor the app's
    environment; the slot's socket is its group's (nginx's way in), no other user's; a create through
    nginx is answered."""
    host, slot = deployed.host, deployed.slot()
    master = deployed.show("plantstore-nginx", "MainPID")["MainPID"]
    nginx = [master, *host.run(f"pgrep -P {master}").stdout.split()]
    # nginx writes its process title over the environment's first copy, which /proc/PID/environ reads:
    # neither a secret's name nor its value is there, nor in what systemd gives the unit (the edge file).
    environments = {pid: host.run(f"tr '\\0' '\\n' </proc/{pid}/environ").stdout for pid in nginx}
    settings = host.run(f"cat /etc/plantstore/slots/{slot}.env").stdout.splitlines()
    secret_lines = [line for line in settings if line.split("=", 1)[0] in SECRETS]
    given = deployed.show("plantstore-nginx", "Environment")
    # Every file systemd reads for the unit, one line each (show() would keep the last).
    files = host.run("systemctl show plantstore-nginx -p EnvironmentFiles").stdout.splitlines()
    edge = host.run(f"cat {EDGE_FILE}").stdout
    users = host.run(f"ps -o user:20=,group:20=,supgrp:40= -p {','.join(nginx)}").stdout.splitlines()
    app = [deployed.app_main(), *sorted(deployed.app_workers())]
    unreadable = [ENV_FILE, f"/etc/plantstore/slots/{slot}.env", *(f"/proc/{pid}/environ" for pid in app)]
    read = [host.run(f"runuser -u plantstore-edge -- cat {path}", check=False) for path in unreadable]
    modes = host.run(f"stat -c '%n %U %G %a' /run/plantstore/{slot} /run/plantstore/{slot}/app.sock").stdout
    probe = (
        f"env -C /opt/plantstore $(grep ^DJANGO_ALLOWED_HOSTS= {EDGE_FILE}) .venv/bin/python -m deploy.probe"
        f" --socket /run/plantstore/{slot}/app.sock /livez"
    )
    # Another user (nobody) cannot reach the socket; nginx's user, with the group its unit gives it, can.
    other = host.run(f"runuser -u nobody -- {probe}", check=False)
    in_group = host.run(f"runuser -u plantstore-edge -G plantstore -- {probe}", check=False)
    created = deployed.create(26_000, deployed.token)[0]

    assert len(nginx) >= 2, nginx  # the master and its worker
    assert len(secret_lines) == len(SECRETS), [line.split("=", 1)[0] for line in settings]
    leaked = {
        pid: [
            line.split("=", 1)[0]
            for line in secret_lines
            if line.split("=", 1)[0] in text or line.split("=", 1)[1] in text
        ]
        for pid, text in environments.items()
    }
    assert leaked == {pid: [] for pid in nginx}
    assert files == [f"EnvironmentFiles={EDGE_FILE} (ignore_errors=no)"]
    assert [name for name in SECRETS if name in edge or name in given["Environment"]] == []
    assert f"PLANTS_APP_SLOT={slot}" in edge.splitlines()
    assert [(user, group, "plantstore" in groups.split(",")) for user, group, groups in map(str.split, users)] == [
        ("plantstore-edge", "plantstore-edge", True)
    ] * len(nginx)
    assert [(done.returncode, done.stdout, "Permission denied" in done.stderr) for done in read] == [
        (1, "", True)
    ] * len(unreadable), [done.stderr for done in read]
    assert modes.splitlines() == [
        f"/run/plantstore/{slot} plantstore plantstore 750",
        f"/run/plantstore/{slot}/app.sock plantstore plantstore 660",
    ]
    assert (other.returncode, in_group.returncode) == (1, 0), (other.stderr, in_group.stderr)
    assert created == 200


def test_systemd_analyze_verifies_the_installed_units_and_rates_each_service_s_exposure_1_5(deployed):
    # Each slot as it runs: the template alone would be checked as an instance of no slot's release.
    files = " ".join(
        f"/etc/systemd/system/{name}"
        for name in (
            "plantstore.target",
            "plantstore-nginx.service",
            "plantstore-app@a.service",
            "plantstore-app@b.service",
        )
    )
    verified = deployed.host.run(f"systemd-analyze verify {files}", check=False)
    # 1.5 of 10 ("OK"), of each running service (Debian's nginx.service as shipped: 9.6 UNSAFE).
    units = ("plantstore-nginx", f"plantstore-app@{deployed.slot()}")
    rated = [
        deployed.host.run(f"systemd-analyze security --threshold=15 --no-pager {unit}", check=False) for unit in units
    ]

    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")
    assert [done.returncode for done in rated] == [0, 0], [done.stdout[-2000:] for done in rated]
    exposure = [
        f"Overall exposure level for {unit}.service: 1.5 OK" in done.stdout
        for unit, done in zip(units, rated, strict=True)
    ]
    assert exposure == [True, True]


def test_stop_drains_succeeds_and_leaves_no_process_of_the_service_user(deployed):
    token, since = deployed.token, deployed.now()
    with deployed.load(token, first_id=40_000, clients=4, limit=3000, timeout=30) as load:
        load.wait_for(100)
        stopped = deployed.host.run("systemctl stop plantstore.target", check=False)
    shown = [
        deployed.show(unit, "Result", "ActiveState")
        for unit in ("plantstore-nginx", f"plantstore-app@{deployed.slot()}")
    ]
    left = deployed.host.run("ps -u plantstore,plantstore-edge -o pid=,args=", check=False)
    journal = deployed.journal(since)
    started = deployed.host.run("systemctl start plantstore.target", check=False)
    # systemctl start returned once /livez answered through nginx (ExecStartPost=): no wait after it.
    livez_after_start = request(f"{deployed.url}/livez", proxy="127.0.0.1")[0]

    assert (stopped.returncode, shown) == (0, [{"Result": "success", "ActiveState": "inactive"}] * 2)
    assert (left.returncode, left.stdout) == (1, "")  # ps: no process of that user
    # Every request got its answer or found no server listening; none was cut off.
    assert [(status, text) for _, status, _, text, _ in load.answers if status not in (200, None)] == []
    assert any(line.startswith("Stopped plantstore-nginx.service") for line in journal), journal[-20:]
    assert (started.returncode, livez_after_start) == (0, 200)


def test_deploy_s_manage_script_passes_the_command_s_exit_status_and_output_through(deployed):
    unknown = deployed.host.run(f"{MANAGE} token revoke nobody", check=False)
    listed = deployed.host.run(f"{MANAGE} token list").stdout.splitlines()
    whoami = (
        'shell -v 0 -c \'import os; print(os.getuid(), os.environ["PWD"], os.environ["PLANTS_DATABASE_TIMEOUT_S"])\''
    )
    as_root, as_user = (
        deployed.host.run(f"{MANAGE} {options}{whoami}").stdout
        for options in ("--as-root ", "PLANTS_DATABASE_TIMEOUT_S=600 ")
    )
    uid = deployed.host.run("id -u plantstore").stdout.strip()

    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (
        1,
        "",
        "CommandError: No active token named 'nobody'.\n",
    )
    assert (listed[0].split(), [line.split()[0] for line in listed].count(CLIENT)) == (
        ["NAME", "PREFIX", "CREATED", "EXPIRES", "LAST", "USED", "STATUS"],
        1,
    )
    # The file's setting (.env.example's 5), or one given for the command alone.
    assert (as_root, as_user) == ("0 /opt/plantstore 5\n", f"{uid} /opt/plantstore 600\n")


def test_on_a_terminal_createsuperuser_through_it_asks_its_questions_and_a_failure_s_status_comes_back(deployed):
    """docs/operating.md's createsuperuser on a terminal, which the docs' runner does not give a
    block: run here as written, on one."""
    password = secrets.token_urlsafe(16)
    username = f"operator-{secrets.token_hex(4)}"
    answers = {"Username": username, "Email address": "operator@example.com", "Password": password}
    assert "on your terminal: `deploy/plantstore-manage createsuperuser`" in PAGES["operating.md"].read_text()
    transcript = deployed.host.converse(f"{MANAGE} createsuperuser", answers)
    check = f"from django.contrib.auth.models import User; print(User.objects.get(username='{username}').is_superuser)"
    superuser = deployed.host.run(f'{MANAGE} shell -v 0 -c "{check}"').stdout
    failed = deployed.host.converse(f"{MANAGE} token revoke nobody; echo exit status $?", {})

    assert "Superuser created successfully." in transcript, transcript
    assert superuser == "True\n"
    assert "CommandError: No active token named 'nobody'.\r\nexit status 1\r\n" in failed, failed


def test_on_sqlite_in_its_state_directory_it_migrates_serves_releases_and_counts_on_after_a_restart(deployed, docs):
    database_url = next(
        line.split("=", 1)[1]
        for line in deployed.host.run(f"cat {ENV_FILE}").stdout.splitlines()
        if line.startswith("DATABASE_URL=")
    )
    deployed.configure(DATABASE_URL=SQLITE_URL)
    since = deployed.now()
    try:
        deployed.host.run(f"{MANAGE} migrate --no-input")
        released = deployed.release().returncode
        token = deployed.issue("sqlite-client")
        seconds_left_today = 86400 - time.time() % 86400  # the counts are per day, from UTC midnight
        if seconds_left_today < 120:
            time.sleep(seconds_left_today + 1)
        before = deployed.create(1, token, name="Fern")
        released_again = deployed.release(check=False).returncode
        restarted = deployed.restart()
        after = deployed.create(2, token, name="Fern")
        owner = deployed.host.run("stat -c '%U %a' /var/lib/plantstore /var/lib/plantstore/db.sqlite3").stdout
        # docs/operating.md's online copy, as written, while the service serves.
        docs.run("operating.md", "deploy/plantstore-manage sqlite_backup /var/lib/plantstore/backup.sqlite3")
        copied = deployed.host.run(
            'python3 -c "import sqlite3; print(sorted(row[0] for row in sqlite3.connect('
            "'/var/lib/plantstore/backup.sqlite3').execute('SELECT id FROM plants_plant')))\""
        ).stdout
        journal = deployed.journal(since)
    finally:
        deployed.configure(DATABASE_URL=database_url)
        deployed.release()

    assert (released, released_again, restarted) == (0, 0, 0), "\n".join(journal[-60:])
    assert [(answer[0], answer[1]["RateLimit"].split(";")[1]) for answer in (before, after)] == [
        (200, f"r={RATE - 1}"),
        (200, f"r={RATE - 2}"),
    ]
    assert owner.splitlines() == ["plantstore 700", "plantstore 644"]
    assert copied == "[1, 2]\n"


def test_every_shell_block_of_the_operator_s_pages_ran_as_written_and_passed_but_the_marked_ones(deployed, docs):
    """The blocks no test above ran at its step (a new one, and the marked ones, skipped with their
    reasons); then the README's first create, with make run's recipe serving in a developer's
    checkout on the host (in place of the stopped unit, on its port: the host has no make, and the
    venv is the release's, of the same requirements.txt): every block of the three pages ran once
    and passed, but the marked ones."""
    collected = docs.collected()
    docs.run_nodes([node for node in collected if node not in docs.results and not node.startswith("README.md")])
    deployed.host.run(
        f"systemctl stop plantstore.target && git clone -q /srv/plantstore {CHECKOUT} && cd {CHECKOUT}"
        " && ln -s /opt/plantstore/.venv .venv && DJANGO_DEBUG=1 .venv/bin/python manage.py migrate --no-input -v 0"
        f" && systemd-run --quiet --unit=make-run --working-directory={CHECKOUT} --setenv=DJANGO_DEBUG=1"
        " .venv/bin/python manage.py runserver 127.0.0.1:8000"
        " && until curl -so /dev/null http://127.0.0.1:8000/livez; do sleep 0.2; done",
        timeout=120,
    )
    docs.run_nodes([node for node in collected if node not in docs.results])

    assert [node for node in collected if node not in docs.results] == []
    assert {node: message for node, (outcome, message) in docs.results.items() if outcome == "failed"} == {}
    assert sorted(message for outcome, message in docs.results.values() if outcome == "skipped") == sorted(
        skip_reasons()
    )
    assert len(skip_reasons()) == 3
