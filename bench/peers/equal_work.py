"""The Django peers' equal-work variants (PEER_EQUAL_WORK=1): the count each throttle hook calls, and the request log."""

import time

from django.db import connection

from bench.peers.shared import COUNT_REQUEST, WINDOW_S, log_request, request_id, window_start


def count_request(key: str) -> int:
    """Count one request of `key` in the current window; return the window's count so far."""
    with connection.cursor() as cursor:
        cursor.execute(COUNT_REQUEST.format(key="%s", window="%s"), [key, window_start()])
        return cursor.fetchone()[0]


def seconds_to_next_window() -> float:
    return WINDOW_S - time.time() % WINDOW_S


class RequestLogMiddleware:
    """One JSON line per request (bench/peers/shared.py), its request id answered in X-Request-ID, as the
    service does; `token` is the token's name (DRF and django-ninja both leave the token in request.auth)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started, answer_id = time.perf_counter(), request_id(request.headers.get("X-Request-ID", ""))
        response = self.get_response(request)
        response["X-Request-ID"] = answer_id
        token = getattr(getattr(request, "auth", None), "name", None)
        log_request(request.method, request.path, response.status_code, started, token, answer_id)
        return response
