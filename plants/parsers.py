"""The request body parser: strict JSON objects, UTF-8, bounded in size."""

import json

from django.conf import settings
from rest_framework.parsers import BaseParser

from plants.exceptions import BodyTooLarge, MalformedBody


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


class PlantJSONParser(BaseParser):
    """Parses `application/json` bodies into a dict; anything else is MALFORMED_BODY.

    The size cap (PLANTS_MAX_BODY_BYTES) is checked against Content-Length before reading,
    and again while reading, so a large body is never held in memory.
    """

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> dict:
        limit = settings.PLANTS_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise BodyTooLarge(limit)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedBody("The body is not valid UTF-8.") from None
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except ValueError as error:
            raise MalformedBody(f"The body is not valid JSON: {error}.") from None
        if not isinstance(data, dict):
            raise MalformedBody("The body must be a JSON object (a NewPlant).")
        return data
