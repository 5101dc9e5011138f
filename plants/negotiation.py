"""Content negotiation for an API that speaks only JSON."""

from rest_framework.negotiation import DefaultContentNegotiation


class JSONOnlyNegotiation(DefaultContentNegotiation):
    """Parsers are chosen by Content-Type as usual (else 415); the answer is always the
    view's first renderer, whatever Accept says, since JSON is all we serve."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type
