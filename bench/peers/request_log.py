"""The Django peers' request log, in their equal-work variants: one JSON line per request, from a middleware."""

import logging
import os
import re
import time

from bench.peers.json_log import REQUEST_LOGGER

logger = logging.getLogger(REQUEST_LOGGER)

# A client's request id is echoed only if it is short and plain (the service's rule).
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestLogMiddleware:
    """Logs `{"method", "path", "status", "duration_ms", "token", "request_id"}` through logging's
    JSON formatter (bench/peers/json_log.py) and answers the request id in X-Request-ID, as the
    service does; `token` is the token's name (DRF and django-ninja both leave it in request.auth)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if SAFE_REQUEST_ID.fullmatch(incoming) else os.urandom(16).hex()
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        fields = {
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            "token": getattr(getattr(request, "auth", None), "name", None),
            "request_id": request_id,
        }
        logger.info("request", extra={"fields": fields})
        return response
