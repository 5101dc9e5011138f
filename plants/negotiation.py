"""Content negotiation for an API that reads and writes only JSON."""

import re

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import BaseContentNegotiation

# How specific each media range that covers application/json is (RFC 9110, section 12.5.1).
JSON_RANGES = {"application/json": 2, "application/*": 1, "*/*": 0}
QVALUE = re.compile(r"0(\.\d{0,3})?|1(\.0{0,3})?")


def request_media_type(request) -> str:
    """The request's Content-Type without parameters, e.g. 'application/json'; '' if none."""
    return request.content_type.partition(";")[0].strip().lower()


def range_weight(parameters: list[str]) -> float | None:
    """A media range's q (1 when absent); None when it is malformed, and the range is ignored."""
    weight = 1.0
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            if not QVALUE.fullmatch(value.strip()):
                return None
            weight = float(value)
    return weight


def accepts_json(accept: str) -> bool:
    """Whether an Accept header allows application/json: an empty one does; otherwise the most
    specific range that covers it decides, by its weight (`application/json;q=0` refuses it)."""
    if not accept.strip():
        return True
    best_rank, best_weight = -1, 0.0
    for media_range in accept.split(","):
        media_type, *parameters = media_range.split(";")
        rank = JSON_RANGES.get(media_type.strip().lower(), -1)
        if rank > best_rank and (weight := range_weight(parameters)) is not None:
            best_rank, best_weight = rank, weight
    return best_weight > 0


class JSONOnlyNegotiation(BaseContentNegotiation):
    """A body is parsed by the parser of its exact media type (parameters such as charset aside),
    else DRF answers 415. The answer is always JSON: a request whose Accept header excludes
    application/json is 406 NOT_ACCEPTABLE (its Error body in JSON all the same).

    DRF's documented extension point, for what its DefaultContentNegotiation does not do: it ignores
    q-values (`application/json;q=0` is answered in JSON) and refuses an empty Accept header with 406
    (both pinned in tests/test_errors.py).
    """

    def select_parser(self, request, parsers):
        media_type = request_media_type(request)
        return next((parser for parser in parsers if parser.media_type == media_type), None)

    def select_renderer(self, request, renderers, format_suffix=None):
        accept = request.META.get("HTTP_ACCEPT", "")
        if accept and accept != "*/*" and not accepts_json(accept):
            raise NotAcceptable("The answer can only be application/json, which the Accept header excludes.")
        return renderers[0], renderers[0].media_type
