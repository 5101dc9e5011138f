"""Per-token rate limits: RateLimit headers on every counted answer, 429 past the quota, one shared count."""

import fcntl
import json
import math
import multiprocessing
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.exceptions import ImproperlyConfigured

from plants.models import Plant
from plants.rate_stores import CountersFileStore
from plants.services import token_issue
from plants.throttling import RatePolicy, rate_policy
from tests.live import request

pytestmark = pytest.mark.django_db

HOUR = 3600
# 1000 s into an hourly window: 2600 s until it resets.
WINDOW_START = 1_800_000_000 - 1_800_000_000 % HOUR
NOW = WINDOW_START + 1000


class Clock:
    """The throttle's clock, set by the test: no test waits for, or straddles, a window's end."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["file", "redis"])
def store(request, settings, tmp_path):
    """Each test runs against both stores: the default counters file, and a real redis-server."""
    settings.PLANTS_THROTTLE_DIR = str(tmp_path / "rate-limits")
    settings.REDIS_URL = request.getfixturevalue("redis_server").url if request.param == "redis" else ""
    return request.param


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock(NOW)
    monkeypatch.setattr("plants.throttling.clock", clock)
    return clock


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


def test_empty_rate_turns_throttling_and_its_headers_off(settings, post_plant):
    settings.PLANTS_THROTTLE_RATE = ""

    answers = [post_plant({"id": plant_id, "name": "Rose"}) for plant_id in range(10)]

    assert {answer.status_code for answer in answers} == {200}
    assert {rate_limit_headers(answer) for answer in answers} == {(None, None)}


def test_redis_outage_fails_closed_with_503_and_stores_nothing(settings, redis_server, post_plant, caplog):
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    settings.REDIS_URL = redis_server.url
    redis_server.stop()

    response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert response.json() == {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."}
    assert rate_limit_headers(response) == (None, None)
    assert not Plant.objects.exists()
    assert "rate-limit store unavailable: ConnectionError" in caplog.text


def test_unwritable_counters_file_fails_closed_with_503(settings, tmp_path, post_plant, caplog):
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    settings.REDIS_URL = ""
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    settings.PLANTS_THROTTLE_DIR = str(not_a_directory)

    response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert response.json()["error"] == 50300
    assert not Plant.objects.exists()
    assert "rate-limit store unavailable" in caplog.text


def counters_file(directory, window: int = HOUR):
    return directory / f"rate-limits-{window}s.counters"


@pytest.fixture
def counting_in(settings, tmp_path, clock):
    """3/hour in a counters file of the test's own: its directory."""
    settings.PLANTS_THROTTLE_RATE = "3/hour"
    settings.REDIS_URL = ""
    settings.PLANTS_THROTTLE_DIR = str(tmp_path)
    return tmp_path


def test_file_that_is_not_a_counters_file_fails_closed_and_is_left_as_it_was(counting_in, post_plant):
    counters_file(counting_in).write_bytes(b"something else" * 1000)

    response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert counters_file(counting_in).read_bytes() == b"something else" * 1000
    assert not Plant.objects.exists()


@pytest.fixture
def other_client(api_client):
    """A second token's create: its status code."""
    _, secret = token_issue(name="other-client")

    def post(plant_id: int) -> int:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
        return api_client.post("/plants", {"id": plant_id, "name": "Fern"}, format="json", **headers).status_code

    return post


def test_counters_file_full_of_this_windows_tokens_fails_closed_for_a_new_token_until_the_window_turns(
    counting_in, clock, post_plant, other_client, monkeypatch, caplog
):
    monkeypatch.setattr("plants.rate_stores.COUNTERS_CAPACITY", 1)

    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    assert other_client(2) == 503
    assert "tokens counted in this window fill the counters file" in caplog.text
    assert post_plant({"id": 3, "name": "Rose"}).status_code == 200  # a token already counted goes on

    clock.now += HOUR
    assert other_client(4) == 200
    assert sorted(Plant.objects.values_list("id", flat=True)) == [1, 3, 4]


def test_counters_file_keeps_its_size_whatever_the_tokens_and_windows(counting_in, clock, post_plant, other_client):
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    size = counters_file(counting_in).stat().st_size

    for plant_id in range(2, 8):
        clock.now += HOUR
        assert other_client(plant_id) == 200

    assert counters_file(counting_in).stat().st_size == size


def test_a_clock_that_ran_ahead_once_does_not_hold_the_count_back(counting_in, clock, post_plant):
    clock.now = NOW + 24 * HOUR  # one request under a clock a day ahead, then the clock is put right
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    clock.now = NOW

    statuses = [post_plant({"id": plant_id, "name": "Rose"}).status_code for plant_id in range(2, 6)]

    assert statuses == [200, 200, 200, 429]


def test_two_rates_count_in_files_of_their_own(tmp_path):
    store = CountersFileStore(str(tmp_path))
    hourly = []
    for minute in range(4):
        store.increment("minute-token", WINDOW_START + minute * 60, 60)
        hourly.append(store.increment("hour-token", WINDOW_START, HOUR))

    assert hourly == [1, 2, 3, 4]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "rate-limits-3600s.counters",
        "rate-limits-60s.counters",
    ]


def test_counters_file_cut_short_while_in_use_answers_503_and_the_process_lives_on(counting_in, post_plant):
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    os.truncate(counters_file(counting_in), 100)

    response = post_plant({"id": 2, "name": "Rose"})

    assert (response.status_code, response.json()["error"]) == (503, 50300)
    assert list(Plant.objects.values_list("id", flat=True)) == [1]


def test_counters_file_removed_while_in_use_is_made_again_and_counting_goes_on_there(counting_in, post_plant):
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    counters_file(counting_in).unlink()

    response = post_plant({"id": 2, "name": "Rose"})

    assert response.status_code == 200
    assert rate_limit_headers(response)[1] == '"default";r=2;t=2600'
    assert counters_file(counting_in).exists()


def test_counters_file_locked_past_the_timeout_answers_503_until_it_is_released(counting_in, post_plant, monkeypatch):
    monkeypatch.setattr("plants.rate_stores.LOCK_TIMEOUT_SECONDS", 0.2)
    assert post_plant({"id": 1, "name": "Rose"}).status_code == 200
    with open(counters_file(counting_in), "rb") as holder:  # another process's lock, stuck
        fcntl.flock(holder, fcntl.LOCK_EX)
        stuck = post_plant({"id": 2, "name": "Rose"})
        fcntl.flock(holder, fcntl.LOCK_UN)

    assert (stuck.status_code, stuck.json()["error"]) == (503, 50300)
    assert post_plant({"id": 3, "name": "Rose"}).status_code == 200
    assert sorted(Plant.objects.values_list("id", flat=True)) == [1, 3]


def test_symlink_at_the_counters_file_path_is_refused_and_its_target_never_made(counting_in, post_plant):
    target = counting_in / "elsewhere"
    counters_file(counting_in).symlink_to(target)

    response = post_plant({"id": 1, "name": "Rose"})

    assert response.status_code == 503
    assert not target.exists()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_threads_of_a_process_share_one_open_counters_file(tmp_path):
    store = CountersFileStore(str(tmp_path))
    store.increment("token", WINDOW_START, HOUR)
    before = open_descriptors()

    for _ in range(20):  # a thread per request, as some servers run them
        thread = threading.Thread(target=store.increment, args=("token", WINDOW_START, HOUR))
        thread.start()
        thread.join()

    assert open_descriptors() == before
    assert store.increment("token", WINDOW_START, HOUR) == 22


def count_in_child(store, results) -> None:
    results.put([store.increment("token", WINDOW_START, HOUR) for _ in range(50)])


def test_a_process_forked_after_counting_counts_on_in_the_same_file_exactly(tmp_path):
    store = CountersFileStore(str(tmp_path))
    assert store.increment("token", WINDOW_START, HOUR) == 1
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    children = [context.Process(target=count_in_child, args=(store, results)) for _ in range(2)]
    for child in children:
        child.start()
    counted = [count for _ in children for count in results.get(timeout=30)]
    for child in children:
        child.join(timeout=30)

    assert sorted(counted) == list(range(2, 102))
    assert store.increment("token", WINDOW_START, HOUR) == 102


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
    else:  # one server, its workers sharing the counters file
        environment["PLANTS_THROTTLE_DIR"] = str(tmp_path / "rate-limits")
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
    environment = {"PLANTS_THROTTLE_RATE": f"{QUOTA}/hour", "PLANTS_THROTTLE_DIR": str(tmp_path / "rate-limits")}
    wait_out_the_top_of_the_hour()
    first = production_unit(**environment)
    spent = post_over_fresh_connections([first], token, QUOTA - 1)
    first.stop()

    second = production_unit(**environment)
    answers = post_over_fresh_connections([second], token, 2, first_id=QUOTA)

    assert [status for status, _, _ in spent] == [200] * (QUOTA - 1)
    assert sorted(status for status, _, _ in answers) == [200, 429]
    assert Plant.objects.count() == QUOTA
