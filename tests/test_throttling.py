"""Per-token rate limits: RateLimit headers on every counted answer, 429 past the quota, one shared count."""

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from plants import rate_stores
from plants.models import ApiToken, Plant, RateLimitCounter
from plants.services import token_issue
from plants.throttling import RatePolicy, rate_policy
from tests.clock import HOUR, NOW, WINDOW_START
from tests.live import live_unit, manage_on, request

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["database", pytest.param("redis", marks=pytest.mark.live)])
def store(request, settings):
    """Each test runs against both stores: the default (the database), and a real redis-server."""
    if request.param == "redis":
        request.getfixturevalue("counting_in_redis")
    return request.param


@pytest.fixture
def three_per_hour(settings, store, clock):
    settings.PLANTS_THROTTLE_RATE = "3/hour"


def rate_limit_headers(response) -> tuple[str | None, str | None]:
    return response.get("RateLimit-Policy"), response.get("RateLimit")


def test_each_answer_within_the_quota_shows_the_policy_and_what_remains(three_per_hour, post_plant):
    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(3)]

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert [rate_limit_headers(answer) for answer in answers] == [
        ('"default";q=3;w=3600', '"default";r=2;t=2600'),
        ('"default";q=3;w=3600', '"default";r=1;t=2600'),
        ('"default";q=3;w=3600', '"default";r=0;t=2600'),
    ]


def test_request_over_the_quota_returns_429_with_retry_after_and_stores_nothing(three_per_hour, post_plant, clock):
    for plant_id in range(3):
        assert post_plant({"id": plant_id, "name": "Rose"}).status_code == 200
    clock.now += 0.5  # t and Retry-After round up: 2599.5 s left is 2600

    response = post_plant({"id": 99, "name": "Rose"})

    assert response.status_code == 429
    assert response["Retry-After"] == "2600"
    assert rate_limit_headers(response) == ('"default";q=3;w=3600', '"default";r=0;t=2600')
    assert response.json() == {"error": 42900, "message": "Request was throttled. Expected available in 2600 seconds."}
    assert not Plant.objects.filter(id=99).exists()


def test_refused_bodies_count_against_the_quota_and_show_it(three_per_hour, post_plant):
    refused = post_plant({"id": "1", "name": "Rose"})
    wrong_type = post_plant("{}", content_type="text/plain")

    assert (refused.status_code, rate_limit_headers(refused)[1]) == (400, '"default";r=2;t=2600')
    assert (wrong_type.status_code, rate_limit_headers(wrong_type)[1]) == (415, '"default";r=1;t=2600')


def test_next_window_restores_the_whole_quota(three_per_hour, post_plant, clock):
    for plant_id in range(4):
        post_plant({"id": plant_id, "name": "Rose"})
    clock.now = WINDOW_START + HOUR

    response = post_plant({"id": 10, "name": "Rose"})

    assert response.status_code == 200
    assert rate_limit_headers(response)[1] == '"default";r=2;t=3600'


def test_quota_is_counted_for_each_token_separately(three_per_hour, post_plant, api_client):
    statuses = [post_plant({"id": plant_id, "name": "Rose"}).status_code for plant_id in range(4)]
    _, other_secret = token_issue(name="other-client")

    response = api_client.post(
        "/plants", {"id": 50, "name": "Tulip"}, format="json", HTTP_AUTHORIZATION=f"Bearer {other_secret}"
    )

    assert statuses == [200, 200, 200, 429]
    assert response.status_code == 200
    assert rate_limit_headers(response)[1] == '"default";r=2;t=2600'


def test_unauthenticated_answers_carry_no_rate_limit_headers(three_per_hour, api_client):
    response = api_client.post("/plants", {"id": 1, "name": "Rose"}, format="json")

    assert response.status_code == 401
    assert rate_limit_headers(response) == (None, None)


@pytest.mark.parametrize("refused", ["revoked", "expired"])
def test_a_revoked_or_expired_token_is_refused_uncounted_and_leaves_its_quota_whole(
    three_per_hour, post_plant, issued_token, clock, refused
):
    token, _ = issued_token
    if refused == "revoked":
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    else:
        ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now())
    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(4)]
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=None, expires_at=None)  # active again

    after = post_plant({"id": 10, "name": "Rose"})

    assert [(answer.status_code, rate_limit_headers(answer)) for answer in answers] == [(401, (None, None))] * 4
    assert (after.status_code, rate_limit_headers(after)[1]) == (200, '"default";r=2;t=2600')


def test_empty_rate_turns_throttling_and_its_headers_off(settings, post_plant):
    settings.PLANTS_THROTTLE_RATE = ""

    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(10)]

    assert {answer.status_code for answer in answers} == {200}
    assert {rate_limit_headers(answer) for answer in answers} == {(None, None)}


def test_redis_outage_fails_closed_with_503_and_stores_nothing(settings, counting_in_redis, post_plant, caplog):
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    settings.PLANTS_RATE_LIMIT_FAILURE_MODE = "closed"
    counting_in_redis.stop()

    response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert response.json() == {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."}
    assert rate_limit_headers(response) == (None, None)
    assert not Plant.objects.exists()
    assert "rate-limit store unavailable: ConnectionError" in caplog.text


def test_redis_outage_failing_open_serves_uncounted_then_counts_again_once_it_is_back(
    settings, counting_in_redis, post_plant
):
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    counting_in_redis.stop()
    during = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(1, 6)]  # more than the quota
    counting_in_redis.start()  # the same port: the service's client reconnects by itself
    after = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(6, 10)]

    assert [(answer.status_code, rate_limit_headers(answer)) for answer in during] == [(200, (None, None))] * 5
    assert [answer.status_code for answer in after] == [200, 200, 200, 429]
    assert rate_limit_headers(after[0]) == (
        '"default";q=3;w=3600',
        '"default";r=2;t=' + after[0]["RateLimit"].split("t=")[1],
    )
    assert sorted(Plant.objects.values_list("id", flat=True)) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_unreachable_redis_fails_closed_with_503_and_stores_nothing(settings, post_plant, caplog):
    from localcluster.processes import free_port

    settings.PLANTS_THROTTLE_RATE = "3/hour"
    settings.PLANTS_RATE_LIMIT_FAILURE_MODE = "closed"
    settings.CACHES = {  # a port no server listens on: refused at once, no server to start
        **settings.CACHES,
        "rate_limits": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        },
    }

    response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert response.json() == {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."}
    assert not Plant.objects.exists()
    assert "rate-limit store unavailable: ConnectionError" in caplog.text


def test_a_clock_that_ran_ahead_once_does_not_hold_the_count_back(three_per_hour, clock, post_plant):
    clock.now = NOW + 24 * HOUR  # one request under a clock a day ahead, then the clock is put right
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    clock.now = NOW

    statuses = [post_plant({"id": plant_id, "name": "Rose"}).status_code for plant_id in range(2, 6)]

    assert statuses == [200, 200, 200, 429]


def test_database_counts_each_token_in_one_row_reused_from_window_to_window(settings, clock, post_plant, issued_token):
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    for hour in range(3):
        clock.now = NOW + hour * HOUR
        for n in range(2):
            assert post_plant({"id": 10 * hour + n, "name": "Rose"}).status_code == 200

    counters = list(RateLimitCounter.objects.values_list("key", "window_start", "count"))

    assert counters == [(issued_token[0].digest, WINDOW_START + 2 * HOUR, 2)]


def test_request_computed_just_before_its_window_turned_counts_in_the_newer_one(settings, clock, post_plant):
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    clock.now = NOW + HOUR  # the next window counts one request
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    clock.now = NOW  # then one whose clock was read before the window turned

    response = post_plant({"id": 2, "name": "Rose"})

    assert response.status_code == 200
    assert RateLimitCounter.objects.get().count == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_database_count_is_exact_under_concurrent_increments_from_many_connections():
    from django.db import connection

    def count_some(_) -> list[int]:
        try:
            return [rate_stores.increment("one-token", WINDOW_START, HOUR) for _ in range(50)]
        finally:
            connection.close()  # this thread's own connection

    with ThreadPoolExecutor(max_workers=8) as pool:
        counts = [count for counts in pool.map(count_some, range(8)) for count in counts]

    assert sorted(counts) == list(range(1, 401))
    assert RateLimitCounter.objects.get(key="one-token").count == 400


@pytest.mark.parametrize(
    ("rate", "policy"),
    [("600/minute", (600, 60)), ("5/s", (5, 1)), ("2/hour", (2, 3600)), ("1/day", (1, 86400))],
)
def test_rate_is_read_as_drf_reads_it(rate, policy):
    assert rate_policy(rate) == RatePolicy(*policy)


@pytest.mark.parametrize(
    "rate", ["lots", "0/minute", "-1/minute", "5/fortnight", "5/", "/minute", "5", "5/minute/hour", "five/minute"]
)
def test_rate_that_is_not_a_positive_count_per_period_is_refused(rate):
    with pytest.raises(ImproperlyConfigured, match="PLANTS_THROTTLE_RATE must look like 600/minute"):
        rate_policy(rate)


# Live: real app server workers (separate processes) counting in one store.

QUOTA = 10


def wait_out_the_top_of_the_hour(margin: float = 60) -> None:
    """The live servers use the real clock: keep one test's requests inside one hourly window."""
    left = HOUR - time.time() % HOUR
    if left < margin:
        time.sleep(left + 1)


def post_over_fresh_connections(servers, token: str, count: int, first_id: int = 0) -> list[tuple]:
    """`count` creates (ids from `first_id`), spread over the servers from 6 client threads, each on a new connection."""

    def post(plant_id: int):
        status, headers, text = request(
            f"{servers[plant_id % len(servers)].url}/plants", {"id": plant_id, "name": "Rose"}, token
        )
        # The headers as a client's library reads them: by name, in any case (RFC 9110, 5.1).
        return status, headers if headers is not None else {}, text

    with ThreadPoolExecutor(max_workers=6) as pool:
        return list(pool.map(post, range(first_id, first_id + count)))


@pytest.mark.parametrize("store_name", ["default", "redis"])
def test_quota_is_exact_across_worker_processes_and_servers(production_unit, request, tmp_path, token, store_name):
    environment = {"PLANTS_THROTTLE_RATE": f"{QUOTA}/hour", "APP_PROCESSES": "3", "APP_THREADS": "2"}
    if store_name == "redis":  # two servers sharing one Redis
        environment["REDIS_URL"] = request.getfixturevalue("redis_server").url
        servers = [production_unit(**environment), production_unit(**environment)]
    else:  # one server, its workers counting in the database
        servers = [production_unit(**environment)]
    wait_out_the_top_of_the_hour()
    started = time.time()

    answers = post_over_fresh_connections(servers, token, 3 * QUOTA)

    finished = time.time()
    window_end = (started // HOUR + 1) * HOUR
    assert finished < window_end
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * QUOTA + [429] * (2 * QUOTA)
    remaining = []
    for status, headers, text in answers:
        assert headers["RateLimit-Policy"] == f'"default";q={QUOTA};w=3600'
        r, t = headers["RateLimit"].removeprefix('"default";r=').split(";t=")
        assert math.ceil(window_end - finished) <= int(t) <= math.ceil(window_end - started)
        if status == 429:
            assert (r, headers["Retry-After"]) == ("0", t)
            assert json.loads(text) == {
                "error": 42900,
                "message": f"Request was throttled. Expected available in {t} seconds.",
            }
        else:
            remaining.append(int(r))
    assert sorted(remaining) == list(range(QUOTA))
    assert Plant.objects.count() == QUOTA


def test_quota_spent_is_kept_across_a_restart_of_the_server(production_unit, tmp_path, token):
    environment = {"PLANTS_THROTTLE_RATE": f"{QUOTA}/hour"}
    wait_out_the_top_of_the_hour()
    first = production_unit(**environment)
    spent = post_over_fresh_connections([first], token, QUOTA - 1)
    first.stop()

    second = production_unit(**environment)
    answers = post_over_fresh_connections([second], token, 2, first_id=QUOTA)

    assert [status for status, _, _ in spent] == [200] * (QUOTA - 1)
    assert sorted(status for status, _, _ in answers) == [200, 429]
    assert Plant.objects.count() == QUOTA


@pytest.mark.live
@pytest.mark.own_database
def test_postgresql_keeps_the_counts_over_a_clean_restart_and_starts_them_afresh_after_a_crash(
    tmp_path, archived_postgres
):
    """The counts are in an UNLOGGED table (docs/decisions/rate-limit-store.md): a clean restart of
    PostgreSQL keeps them; a crash empties them, so a token's quota is granted afresh in that window.
    Every create acknowledged stays stored either way."""
    database = archived_postgres
    manage_on(database.url, "migrate", "--no-input")
    token = manage_on(database.url, "token", "issue", "counted")
    unit = live_unit(tmp_path, DATABASE_URL=database.url, PLANTS_THROTTLE_RATE="3/hour").start()

    def create(plant_id: int) -> tuple[int, str]:
        # The unit stays up while PostgreSQL restarts: its workers' next connection is a new one.
        status, headers, _ = request(f"{unit.url}/plants", {"id": plant_id, "name": "Fern"}, token)
        return status, headers["RateLimit"].removeprefix('"default";').split(";")[0] if headers else None

    try:
        wait_out_the_top_of_the_hour()
        spent = [create(plant_id) for plant_id in (1, 2, 3)]
        database.stop()
        database.start()
        after_a_clean_restart = create(4)
        database.run(database.bin / "pg_ctl", "-D", database.pgdata, "-m", "immediate", "stop")
        database.start()  # crash recovery
        after_a_crash = [create(plant_id) for plant_id in (5, 6, 7, 8)]
    finally:
        unit.stop()

    assert spent == [(200, "r=2"), (200, "r=1"), (200, "r=0")]
    assert after_a_clean_restart == (429, "r=0")
    assert after_a_crash == [(200, "r=2"), (200, "r=1"), (200, "r=0"), (429, "r=0")]
    assert database.query("SELECT id FROM plants_plant ORDER BY id") == [(1,), (2,), (3,), (5,), (6,), (7,)]
