"""Persistent PostgreSQL connections: health-checked before reuse without a query of their own."""

import os
import resource
import select

import pytest
from django.db import connection
from django.utils import timezone

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def terminate_from_another_session(backend_pid: int) -> None:
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [backend_pid])
    finally:
        other.close()


def wait_until_readable(fileno: int) -> None:
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    assert poller.poll(10_000), "the server's goodbye never arrived"


def test_idle_connection_is_usable_and_checked_without_a_query(django_assert_num_queries):
    connection.ensure_connection()

    with django_assert_num_queries(0):
        assert connection.is_usable()


def test_connection_ended_by_the_server_is_replaced_before_the_next_request_uses_it(post_plant):
    assert post_plant({"id": 1, "name": "Fern"}).status_code == 200
    session = connection.connection

    terminate_from_another_session(session.info.backend_pid)
    wait_until_readable(session.fileno())

    assert not connection.is_usable()
    connection.close_if_unusable_or_obsolete()  # what Django does as a request starts
    assert post_plant({"id": 2, "name": "Fern"}).status_code == 200
    assert connection.connection is not session


@pytest.fixture
def many_open_files():
    """Open files until the next descriptor is numbered above 1024 (select() cannot watch those)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    opened = []
    while not opened or opened[-1] < 1100:
        opened.append(os.open(os.devnull, os.O_RDONLY))
    yield
    for descriptor in opened:
        os.close(descriptor)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_health_check_works_on_a_socket_numbered_above_1024(many_open_files, post_plant):
    connection.close()
    assert post_plant({"id": 1, "name": "Fern"}).status_code == 200
    session = connection.connection
    assert session.fileno() > 1024

    assert connection.is_usable()
    terminate_from_another_session(session.info.backend_pid)
    wait_until_readable(session.fileno())
    assert not connection.is_usable()
    connection.close_if_unusable_or_obsolete()
    assert post_plant({"id": 2, "name": "Fern"}).status_code == 200


def test_timestamptz_column_round_trips_through_the_orm(issued_token):
    from plants.models import ApiToken

    token, _ = issued_token
    when = timezone.now().replace(microsecond=123456)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=when)

    assert ApiToken.objects.get(pk=token.pk).expires_at == when


def test_connection_used_from_an_async_context_is_refused_on_an_open_connection():
    import asyncio

    from django.core.exceptions import SynchronousOnlyOperation

    connection.ensure_connection()

    async def use_the_database():
        with pytest.raises(SynchronousOnlyOperation):
            connection.cursor()
        with pytest.raises(SynchronousOnlyOperation):
            connection.chunked_cursor()
        with pytest.raises(SynchronousOnlyOperation):
            connection.get_autocommit()
        with pytest.raises(SynchronousOnlyOperation):
            connection.set_autocommit(True)

    asyncio.run(use_the_database())
