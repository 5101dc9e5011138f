"""Content negotiation for an API that reads and writes only JSON."""

from rest_framework.negotiation import BaseContentNegotiation


def request_media_type(request) -> str:
    """The request's Content-Type without parameters, e.g. 'application/json'; '' if none."""
    return request.content_type.partition(";")[0].strip().lower()


class JSONOnlyNegotiation(BaseContentNegotiation):
    """A body is parsed by the parser of its exact media type (parameters such as
    charset aside), else DRF answers 415; the answer is always the view's first renderer,
    whatever Accept says, since JSON is all we serve. DRF's general matching of media-type
    ranges is not needed for that, and it runs on every request."""

    def select_parser(self, request, parsers):
        media_type = request_media_type(request)
        return next((parser for parser in parsers if parser.media_type == media_type), None)

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
