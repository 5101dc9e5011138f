"""The OCI image (Dockerfile), built from the checkout by `make image`'s script with podman,
offline, and run as a container: the contract, the health check, its user, what it holds, and a
stop under load; and compose.yaml's stack, its migrate straight to PostgreSQL. Runs in make test's
SQLite pass (it uses no test database)."""

import contextlib
import json
import os
import tarfile
import time
import urllib.request

import pytest

from localcluster.cluster import Redis
from localcluster.processes import free_port
from tests import live
from tests.containers import Podman
from tests.live import DEPLOYED_SETTINGS, PUBLIC_HOST, Load, wait_until_healthy

pytestmark = [pytest.mark.live, pytest.mark.container]

SECRET_KEY = "container-test-secret-key-" + "x" * 40


def request(*args, **kwargs):
    """tests/live.py's request, sent by the client itself: no TLS proxy is in front of the
    container here (podman's published port answers connections from 127.0.0.1 alone)."""
    return live.request(*args, proxy=None, **kwargs)


@pytest.fixture(scope="module")
def podman():
    engine = Podman(f"plantstore-test-{os.urandom(4).hex()}")
    try:
        yield engine
    finally:
        engine.clean()


@pytest.fixture(scope="module")
def image(podman) -> str:
    return podman.build()


class Container:
    """The image run as an operator runs it: migrated once by a one-off container, then served on
    a loopback port, its database on a volume, its root file system read-only (podman mounts a
    tmpfs on /tmp, as a Kubernetes emptyDir would)."""

    def __init__(self, podman: Podman, image: str, name: str, **env: str):
        self.podman, self.image, self.name = podman, image, f"{podman.project}-{name}"
        self.volume = f"{self.name}-data"
        # As docs/deploying.md runs it: the secret key and the public host name, nothing else.
        self.env = {"DJANGO_SECRET_KEY": SECRET_KEY, "DJANGO_ALLOWED_HOSTS": PUBLIC_HOST, **env}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def options(self) -> list[str]:
        volume = ["--read-only", "-v", f"{self.volume}:/var/lib/plantstore"]
        return [*volume, *(f"--env={k}={v}" for k, v in self.env.items())]

    def one_off(self, *command: str) -> str:
        return self.podman("run", "--rm", *self.options(), self.image, *command).stdout

    def start(self) -> "Container":
        self.one_off("python", "manage.py", "migrate", "--no-input")
        self.podman("run", "-d", "--name", self.name, "-p", f"127.0.0.1:{self.port}:8000", *self.options(), self.image)
        if not wait_until_healthy(self.url, None, timeout=60):
            raise RuntimeError(f"the container did not become healthy:\n{self.logs()}")
        return self

    def token(self) -> str:
        return self.podman(
            "exec", self.name, "python", "manage.py", "token", "issue", "container-client"
        ).stdout.strip()

    def logs(self) -> str:
        done = self.podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def stored_ids(self) -> set[int]:
        code = "from plants.models import Plant; print(list(Plant.objects.values_list('id', flat=True)))"
        return set(json.loads(self.one_off("python", "manage.py", "shell", "-v", "0", "-c", code)))


@pytest.fixture(scope="module")
def container(podman, image) -> Container:
    return Container(podman, image, "app").start()


def test_the_container_answers_the_contract_with_a_token_issued_in_it(container):
    token = container.token()

    created = request(f"{container.url}/plants", {"id": 1, "name": "Monstera"}, token)
    duplicate = request(f"{container.url}/plants", {"id": 1, "name": "Fern"}, token)
    anonymous = request(f"{container.url}/plants", {"id": 2, "name": "Fern"})
    health = request(f"{container.url}/healthz")
    stylesheet = request(f"{container.url}/static/admin/css/base.css")
    other_host = request(f"{container.url}/healthz", Host="127.0.0.1")

    assert (created[0], json.loads(created[2])) == (200, {"id": 1, "name": "Monstera"})
    assert (duplicate[0], json.loads(duplicate[2])["error"]) == (400, 40003)
    assert (anonymous[0], json.loads(anonymous[2])) == (
        401,
        {"error": 40100, "message": "Authentication credentials were not provided."},
    )
    assert (health[0], json.loads(health[2]), health[1]["Server"]) == (200, {"status": "ok"}, "nginx")
    assert (stylesheet[0], stylesheet[1]["Content-Type"].split(";")[0]) == (200, "text/css")
    assert (other_host[0], json.loads(other_host[2])["error"]) == (400, 40000)
    assert container.stored_ids() == {1}


def test_every_process_in_it_runs_as_the_unprivileged_user(podman, container):
    users = podman("top", container.name, "user", "huser", "comm").stdout.splitlines()[1:]

    assert len(users) >= 6  # tini, serve.py, nginx's master and worker, Granian and its 2 workers
    assert {tuple(line.split()[:2]) for line in users} == {("plantstore", "10001")}


def test_the_image_declares_its_port_user_stop_signal_and_a_health_check_that_passes(podman, image, container):
    inspected = podman.inspect(image, "image")
    config = inspected["Config"]

    assert (list(config["ExposedPorts"]), config["User"], config["StopSignal"]) == (
        ["8000/tcp"],
        "plantstore",
        "SIGTERM",
    )
    assert "/livez" in " ".join(inspected["Healthcheck"]["Test"])  # liveness: nginx answers it, whatever the database
    # With only the public host name allowed (container.env), as the docs run it.
    assert podman("healthcheck", "run", container.name, check=False).returncode == 0
    assert not [line for line in config["Env"] if line.startswith(("DJANGO_SECRET_KEY", "PIP_", "SSL_CERT"))]


def test_a_rate_limit_store_down_at_start_does_not_stop_it_and_it_serves_once_the_store_is_back(podman, image):
    redis, port = Redis(), free_port()  # Redis's port chosen, not started: down when the container starts
    # On the host's network, so that it reaches the host's loopback Redis once that starts.
    server = Container(
        podman,
        image,
        "store-down",
        REDIS_URL=redis.url,
        PLANTS_LISTEN=f"127.0.0.1:{port}",
        PLANTS_RATE_LIMIT_FAILURE_MODE="closed",
    )
    server.one_off("python", "manage.py", "migrate", "--no-input")
    podman("run", "-d", "--name", server.name, "--network", "host", *server.options(), image)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_healthy(url, None, timeout=60, path="/livez"), server.logs()
        token = server.token()
        health, create = request(f"{url}/healthz"), request(f"{url}/plants", {"id": 1, "name": "Rose"}, token)
        unhealthy = podman("healthcheck", "run", server.name, check=False).returncode
        redis.start()
        assert wait_until_healthy(url, None, timeout=15), server.logs()
        after = request(f"{url}/plants", {"id": 2, "name": "Fern"}, token)
        healthy = podman("healthcheck", "run", server.name, check=False).returncode
        inspected = podman.inspect(server.name)
    finally:
        redis.stop()

    assert (health[0], json.loads(health[2])) == (
        503,
        {"error": 50300, "message": "The rate-limit store does not answer."},
    )
    assert (create[0], json.loads(create[2])["error"]) == (503, 50300)
    assert (unhealthy, healthy) == (0, 0)  # liveness, which the store's outage does not fail
    assert (after[0], json.loads(after[2])) == (200, {"id": 2, "name": "Fern"})
    # The processes it started with: never restarted.
    assert (inspected["State"]["Status"], inspected["RestartCount"]) == ("running", 0)
    assert server.stored_ids() == {2}


def test_the_image_run_with_env_example_s_settings_is_healthy_and_redirects_plain_http(podman, image):
    # .env.example as an operator deploys it: only the secrets, the database and the listener
    # replaced. Its trusted proxy is no address of this run, so every request here is plain HTTP
    # from outside the proxy: redirected to HTTPS; the health checks answer.
    settings = {**DEPLOYED_SETTINGS, "DATABASE_URL": "sqlite:////var/lib/plantstore/db.sqlite3"}
    settings.pop("DJANGO_SETTINGS_MODULE")
    settings.pop("PLANTS_LISTEN", None)
    server = Container(podman, image, "env-example", **settings).start()

    healthy = podman("healthcheck", "run", server.name, check=False).returncode
    create = request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, server.token())

    assert healthy == 0
    assert (create[0], create[1]["Location"]) == (301, f"https://{PUBLIC_HOST}/plants")
    assert server.stored_ids() == set()


def test_the_image_holds_the_app_and_its_venv_but_no_checkout_caches_or_secrets(podman, image, tmp_path):
    podman("create", "--name", f"{podman.project}-files", image)
    podman("export", "-o", str(tmp_path / "files.tar"), f"{podman.project}-files")
    with tarfile.open(tmp_path / "files.tar") as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}

    assert {"opt/plantstore/app/manage.py", "opt/plantstore/venv/bin/granian", "usr/sbin/nginx"} <= names
    assert "opt/plantstore/static/admin/css/base.css" in names
    app = {name.split("/")[3] for name in names if name.startswith("opt/plantstore/app/")}
    assert app == {"manage.py", "requirements.txt", "plants", "plantstore_site", "deploy", "__pycache__"}
    assert [name for name in names if {".git", ".venv", ".env", "db.sqlite3"} & set(name.split("/"))] == []
    assert [
        name for name in names if name.startswith(("root/.cache", "run/secrets", "opt/plantstore/venv/bin/pip"))
    ] == []
    assert not {"usr/bin/gcc", "usr/bin/cc", "usr/bin/make"} & names


def test_stop_under_load_answers_what_it_acknowledged_and_exits_within_the_grace_period(podman, image):
    server = Container(podman, image, "stop", PLANTS_THROTTLE_RATE="").start()
    token = server.token()
    with Load(f"{server.url}/plants", token, clients=4, timeout=30, proxy=None) as load:
        load.wait_for(200)
        started = time.monotonic()
        podman("stop", "-t", "40", server.name, timeout=60)
        stopped_in = time.monotonic() - started
    state = podman.inspect(server.name)["State"]
    acknowledged = load.ids_with(200)

    assert len(acknowledged) >= 200
    assert (state["ExitCode"], stopped_in < 40) == (0, True), server.logs()
    assert {status for _, status, *_ in load.answers} <= {200, None}  # after the stop: connection refused
    assert acknowledged <= server.stored_ids()


@pytest.fixture(scope="module")
def compose_env(podman, image) -> dict:
    """What compose.yaml reads at `up`, as an operator exports it, the front on a loopback port."""
    return {
        "PLANTSTORE_IMAGE": image,
        "PLANTSTORE_INFRA_IMAGE": f"localhost/{podman.project}-infra:latest",
        "BASE": podman.base,
        "DJANGO_SECRET_KEY": SECRET_KEY,
        "POSTGRES_PASSWORD": "compose-test-" + os.urandom(8).hex(),
        "DJANGO_ALLOWED_HOSTS": PUBLIC_HOST,
        "PLANTS_LISTEN": f"127.0.0.1:{free_port()}",
    }


@pytest.fixture(scope="module")
def compose(podman, compose_env):
    """compose.yaml up with podman-compose; its front's URL; down at the end."""
    env = compose_env
    podman.compose("up", "-d", env=env)
    try:
        url = f"http://{env['PLANTS_LISTEN']}"
        if not wait_until_healthy(url, None, timeout=120):
            logs = podman("logs", "--tail", "30", f"{podman.project}-compose_app1_1", check=False)
            raise RuntimeError(f"the compose stack's front did not answer 200 on /healthz:\n{logs.stdout}{logs.stderr}")
        # The front answers once one app passes its checks; the other may still be starting.
        if not front_reaches_both_apps(podman, url, timeout=60):
            raise RuntimeError("the compose stack's front did not route a request to each app within 60 s")
        yield url
    finally:
        podman.compose("down", "-t", "40", env=env)


def front_reaches_both_apps(podman, url: str, timeout: float) -> bool:
    """Whether requests sent to the front reach both apps (their X-Request-ID in each app's log)."""
    apps = [f"{podman.project}-compose_{app}_1" for app in ("app1", "app2")]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = urllib.request.Request(
            f"{url}/healthz", headers={"Host": PUBLIC_HOST, "X-Request-ID": f"probe-{os.urandom(4).hex()}"}
        )
        with contextlib.suppress(OSError):
            urllib.request.urlopen(probe, timeout=5).close()
        logs = [podman("logs", app) for app in apps]
        if all('"request_id": "probe-' in log.stdout + log.stderr for log in logs):
            return True
        time.sleep(0.2)
    return False


def test_the_compose_stack_migrates_once_and_stores_creates_through_its_front_in_postgresql(podman, compose):
    project = f"{podman.project}-compose"
    deadline = time.monotonic() + 90
    while (migrate := podman.inspect(f"{project}_migrate_1")["State"])["Status"] != "exited":
        assert time.monotonic() < deadline, "migrate did not finish"
        time.sleep(0.5)
    token = podman(
        "exec", f"{project}_app1_1", "python", "manage.py", "token", "issue", "compose-client"
    ).stdout.strip()

    answers = [request(f"{compose}/plants", {"id": n, "name": f"Compose {n}"}, token)[0] for n in range(1, 21)]
    duplicate = request(f"{compose}/plants", {"id": 1, "name": "Fern"}, token)
    anonymous = request(f"{compose}/plants", {"id": 99, "name": "Fern"})
    rows = podman(
        "exec",
        f"{project}_postgres_1",
        "psql",
        "-h",
        "/tmp",
        "-d",
        "plantstore",
        "-Atc",
        "SELECT id FROM plants_plant ORDER BY id",
    )
    logs = [podman("logs", f"{project}_{app}_1") for app in ("app1", "app2")]
    served = [(log.stdout + log.stderr).count('"path": "/plants", "status": 200') for log in logs]

    assert (migrate["Status"], migrate["ExitCode"]) == ("exited", 0)
    assert answers == [200] * 20
    assert (duplicate[0], json.loads(duplicate[2])["error"]) == (400, 40003)
    assert (anonymous[0], json.loads(anonymous[2])["error"]) == (401, 40100)
    assert rows.stdout.split() == [str(n) for n in range(1, 21)]
    assert sum(served) == 20 and min(served) > 0  # the front shares the creates between both apps


def test_compose_apps_count_each_client_as_the_front_saw_it_and_bad_tokens_shut_out_no_valid_one(podman, compose):
    project = f"{podman.project}-compose"
    network = podman.inspect(f"{project}_plantstore", "network")
    front = podman.inspect(f"{project}_front_1")["NetworkSettings"]["Networks"][f"{project}_plantstore"]
    bad_token, forged = "plnt_revoked-or-mistyped", {"X_Forwarded_For": "198.51.100.99"}

    def create(plant_id: int, token: str, **headers: str) -> int:
        body = {"id": plant_id, "name": "Limit"}
        return request(f"{compose}/plants", body, token, **headers)[0]

    bad = [create(900 + n, bad_token, **forged) for n in range(70)]  # past the limit, 60 a minute
    # Issued once this client is over its limit: no worker of either app has seen it.
    token = podman("exec", f"{project}_app2_1", "python", "manage.py", "token", "issue", "compose-new").stdout.strip()
    served = []
    for n in range(20):
        served.append(create(1000 + n, token))
        bad.append(create(2000 + n, bad_token))
    logs = "".join(
        log.stdout + log.stderr for log in (podman("logs", f"{project}_{app}_1") for app in ("app1", "app2"))
    )
    clients = {
        json.loads(line[line.index("{") :])["client"] for line in logs.splitlines() if '"path": "/plants"' in line
    }

    assert set(bad) == {401, 429} and served == [200] * 20
    # The address the front saw (the network's gateway, which the loopback port forwards from),
    # neither the front's own nor what the client claimed.
    gateway = network["subnets"][0]["gateway"]
    assert clients == {gateway} and front["IPAddress"] not in clients


# A migration step of 6 s, with the Django connection of the command's settings; it prints the
# session's lock_timeout first.
LONG_STEP = (
    "from django.db import connection; cursor = connection.cursor(); cursor.execute('SHOW lock_timeout'); "
    "print('lock_timeout', cursor.fetchone()[0]); cursor.execute('SELECT pg_sleep(6)'); print('slept 6 s')"
)


def migrate_one_off(podman, compose_env: dict, name: str, *command: str, env: tuple = ()) -> tuple[int, str]:
    """`podman-compose run` of the migrate service (its environment, its network), with `command` in
    place of its own if given: (its exit status, its output). podman-compose 1.0.3 does not pass the
    status on: the container is inspected, then removed."""
    container = f"{podman.project}-compose-{name}"
    options = [argument for setting in env for argument in ("-e", setting)]
    podman.compose("run", "--no-deps", "-T", "--name", container, *options, "migrate", *command, env=compose_env)
    status = podman.inspect(container)["State"]["ExitCode"]
    logs = podman("logs", container)
    podman("rm", container)
    return status, logs.stdout + logs.stderr


def test_compose_migrates_straight_to_postgresql_where_a_step_over_5_s_runs_that_pgbouncer_cuts(
    podman, compose_env, compose
):
    project = f"{podman.project}-compose"
    migrated = migrate_one_off(
        podman, compose_env, "long-step", "python", "manage.py", "shell", "-v", "0", "-c", LONG_STEP
    )
    # The same step with an app's settings: through PgBouncer, whose query_timeout (5 s) ends it.
    through_pgbouncer = podman(
        "exec", f"{project}_app1_1", "python", "manage.py", "shell", "-v", "0", "-c", LONG_STEP, check=False
    )
    # A migrate that fails (a setting refused at its start) is not run again: it exits at once.
    started = time.monotonic()
    failed = migrate_one_off(podman, compose_env, "failing", env=("PLANTS_DATABASE_TIMEOUT_S=1",))
    failed_after = time.monotonic() - started

    assert migrated == (0, "lock_timeout 2s\nslept 6 s\n")
    assert through_pgbouncer.returncode == 1
    # The apps' lock bound reaches PostgreSQL through PgBouncer's usual setting: the database's own.
    assert through_pgbouncer.stdout == "lock_timeout 4s\n"
    assert through_pgbouncer.stderr.endswith("django.db.utils.OperationalError: query timeout\n")
    assert failed[0] == 1
    assert failed[1].count("PLANTS_DATABASE_TIMEOUT_S must be at least 2") == 1
    assert failed_after < 20
