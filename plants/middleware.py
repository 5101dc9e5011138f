"""Request logging: one structured line per request, tagged with a request id."""

import json
import logging
import re
import time
import uuid

logger = logging.getLogger("plants.requests")

REQUEST_ID_HEADER = "X-Request-ID"
# A client's request id is echoed only if it is short and plain, so it cannot forge log lines.
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestLogMiddleware:
    """Logs `{"method", "path", "status", "duration_ms", "token", "request_id"}` as JSON.

    Never a body, a query string or a credential: `token` is the token's name.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = incoming if SAFE_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        auth = getattr(request, "auth", None)  # DRF copies the authenticated ApiToken here
        logger.info(
            json.dumps(
                {
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "token": getattr(auth, "name", None),
                    "request_id": request_id,
                }
            )
        )
        return response
