"""The limit on failed authentication per client address: 429 without a count, valid tokens never counted nor refused."""

import pytest

from plants import authentication_limit
from plants.models import ApiToken, Plant, RateLimitCounter
from plants.services import token_issue, tokens_revoke
from tests.clock import HOUR, WINDOW_START

pytestmark = pytest.mark.django_db

UNKNOWN = {"HTTP_AUTHORIZATION": "Bearer plnt_not-a-token-of-ours"}
ROSE = {"id": 1, "name": "Rose"}
REFUSED = {
    "error": 42901,
    "message": "Too many requests without a valid bearer token from this address. Expected available in 2600 seconds.",
}
INVALID = {"error": 40101, "message": "The token is not valid."}


@pytest.fixture
def three_failures_per_hour(settings, clock, monkeypatch):
    """Three failures per address per hour, and a process that has refused no address yet."""
    settings.PLANTS_ANONYMOUS_THROTTLE_RATE = "3/hour"
    monkeypatch.setattr(authentication_limit, "refused_until", {})
    monkeypatch.setattr(authentication_limit, "pruned_window", 0)


@pytest.fixture
def post(api_client):
    """POST a plant from a client address, by default with an unknown token."""

    def post(headers=UNKNOWN, address="192.0.2.1", plant=ROSE, **meta):
        return api_client.post("/plants", plant, format="json", REMOTE_ADDR=address, **headers, **meta)

    return post


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """The secrets hashed for a lookup, as the authenticator hands them to token_digest."""
    hashed: list[str] = []
    from plants import authentication

    def digest(secret: str) -> str:
        hashed.append(secret)
        return "0" * 64

    monkeypatch.setattr(authentication, "token_digest", digest)
    return hashed


def test_failures_past_the_limit_answer_429_with_retry_after_and_cost_the_lookup_alone(
    three_failures_per_hour, post, lookups, clock, django_assert_num_queries
):
    answers = [post() for _ in range(3)]
    clock.now += 0.5  # Retry-After rounds up: 2599.5 s left is 2600

    with django_assert_num_queries(1):  # the token's lookup; nothing counted
        refused = post()

    assert [(answer.status_code, answer.json()) for answer in answers] == [(401, INVALID)] * 3
    assert (refused.status_code, refused.json()) == (429, REFUSED)
    assert refused["Retry-After"] == "2600"
    assert "WWW-Authenticate" not in refused
    assert len(lookups) == 4
    assert RateLimitCounter.objects.get(key="client:192.0.2.1").count == 3


@pytest.mark.parametrize(
    "headers",
    [{}, {"HTTP_AUTHORIZATION": "Basic dXNlcjpwYXNz"}, {"HTTP_AUTHORIZATION": "Bearer two tokens"}],
    ids=["missing", "another-scheme", "malformed"],
)
def test_a_missing_or_malformed_header_counts_as_a_failure_and_past_the_limit_costs_no_query(
    three_failures_per_hour, post, headers, django_assert_num_queries
):
    statuses = [post(headers).status_code for _ in range(3)]
    with django_assert_num_queries(0):
        refused = post(headers)

    assert statuses == [401, 401, 401]
    assert (refused.status_code, refused.json()) == (429, REFUSED)


@pytest.mark.django_db(transaction=True)  # as tests/test_create_plant.py counts a create's statements
def test_requests_with_a_valid_token_are_never_counted_nor_cost_a_query_more(
    three_failures_per_hour, post, auth_headers, settings, django_assert_num_queries
):
    settings.PLANTS_THROTTLE_RATE = "100/hour"
    post(auth_headers, plant={"id": 100, "name": "warm-up"})  # a token's first use records last_used_at
    post()  # one failure from the address: this process's memory of the limit is not empty
    for plant_id in range(5):
        # The token, its count, the INSERT, as without this limit.
        with django_assert_num_queries(3):
            assert post(auth_headers, plant={"id": plant_id, "name": "Rose"}).status_code == 200

    statuses = [post().status_code for _ in range(3)]

    assert statuses == [401, 401, 429]
    assert RateLimitCounter.objects.get(key="client:192.0.2.1").count == 3


def test_a_token_new_to_every_worker_is_served_from_an_address_over_its_limit(three_failures_per_hour, post):
    for _ in range(3):
        post()  # one client behind the address, with a bad token, past the limit
    refused = post()
    _, secret = token_issue(name="another-client")  # issued after: no worker has seen it
    another_client = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}

    served = [post(another_client, plant={"id": plant_id, "name": "Fern"}) for plant_id in (2, 3, 4)]

    assert (refused.status_code, refused.json()) == (429, REFUSED)
    assert [(answer.status_code, answer.json()) for answer in served] == [
        (200, {"id": plant_id, "name": "Fern"}) for plant_id in (2, 3, 4)
    ]
    assert sorted(Plant.objects.values_list("id", flat=True)) == [2, 3, 4]
    assert RateLimitCounter.objects.get(key="client:192.0.2.1").count == 3


def test_a_revoked_token_from_an_address_over_its_limit_is_answered_429_uncounted(
    three_failures_per_hour, post, issued_token
):
    for _ in range(3):
        post()
    tokens_revoke(tokens=ApiToken.objects.filter(pk=issued_token[0].pk))

    refused = post({"HTTP_AUTHORIZATION": f"Bearer {issued_token[1]}"})

    assert (refused.status_code, refused.json()) == (429, REFUSED)
    assert not Plant.objects.exists()
    assert RateLimitCounter.objects.get(key="client:192.0.2.1").count == 3


def test_each_address_has_its_own_count(three_failures_per_hour, post):
    for _ in range(3):
        post(address="192.0.2.1")

    other = [post(address="2001:db8::1").status_code for _ in range(4)]

    assert post(address="192.0.2.1").status_code == 429
    assert other == [401, 401, 401, 429]


def test_behind_nginx_the_address_is_its_x_real_ip(three_failures_per_hour, post):
    for _ in range(3):
        post(address="", HTTP_X_REAL_IP="198.51.100.7")

    assert post(address="", HTTP_X_REAL_IP="198.51.100.7").status_code == 429
    assert post(address="", HTTP_X_REAL_IP="198.51.100.8").status_code == 401


def test_the_count_is_shared_so_another_worker_counts_at_most_one_more_failure(
    three_failures_per_hour, post, lookups, monkeypatch
):
    for _ in range(3):
        post()
    monkeypatch.setattr(authentication_limit, "refused_until", {})  # another worker: it knows nothing yet

    statuses = [post().status_code for _ in range(3)]

    assert statuses == [401, 429, 429]
    assert len(lookups) == 6
    assert RateLimitCounter.objects.get(key="client:192.0.2.1").count == 4


def test_next_window_restores_the_whole_limit(three_failures_per_hour, post, clock):
    for _ in range(4):
        post()
    clock.now = WINDOW_START + HOUR

    statuses = [post().status_code for _ in range(4)]

    assert statuses == [401, 401, 401, 429]


def test_counts_of_addresses_whose_window_ended_are_deleted(three_failures_per_hour, post, clock):
    post(address="192.0.2.1")
    clock.now = WINDOW_START + 2 * HOUR

    post(address="192.0.2.2")

    assert list(RateLimitCounter.objects.values_list("key", "window_start", "count")) == [
        ("client:192.0.2.2", WINDOW_START + 2 * HOUR, 1)
    ]


def test_empty_rate_turns_the_limit_off(settings, post, monkeypatch):
    settings.PLANTS_ANONYMOUS_THROTTLE_RATE = ""
    monkeypatch.setattr(authentication_limit, "refused_until", {})

    statuses = {post().status_code for _ in range(10)}

    assert statuses == {401}
    assert not RateLimitCounter.objects.exists()


@pytest.mark.parametrize(
    ("mode", "failure"),
    [
        ("closed", (503, {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."})),
        ("open", (401, INVALID)),
    ],
)
def test_unreachable_redis_fails_a_failed_authentication_by_the_failure_mode_and_leaves_valid_tokens_alone(
    three_failures_per_hour, settings, post, auth_headers, mode, failure
):
    from localcluster.processes import free_port

    settings.PLANTS_RATE_LIMIT_FAILURE_MODE = mode
    settings.CACHES = {  # a port no server listens on: refused at once
        **settings.CACHES,
        "rate_limits": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        },
    }

    failed, valid = post(), post(auth_headers)

    assert (failed.status_code, failed.json()) == failure
    assert valid.status_code == 200


@pytest.mark.live
def test_redis_counts_failures_for_every_server(three_failures_per_hour, counting_in_redis, post, monkeypatch):
    for _ in range(3):
        post()
    monkeypatch.setattr(authentication_limit, "refused_until", {})  # another server, the same Redis

    statuses = [post().status_code for _ in range(2)]

    assert statuses == [401, 429]
    assert not RateLimitCounter.objects.exists()
