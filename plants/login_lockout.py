"""Admin login lockout: django-axes' database handler with one limit per (user name, client) and one per client."""

from axes.handlers.database import AxesDatabaseHandler
from django.conf import settings
from django.db.models import Sum


def _failures(attempts) -> int:
    return attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0


class PairAndClientLockoutHandler(AxesDatabaseHandler):
    """Locks a user name for one client after AXES_FAILURE_LIMIT failures (PLANTS_ADMIN_LOGIN_FAILURES),
    and a client for every name after PLANTS_ADMIN_CLIENT_LOGIN_FAILURES, with
    AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"] in that order.

    axes itself compares the larger of the two counts with its one limit, and a client's count is
    never below any of its pairs', so with one limit the pair would never be the one that locks.
    """

    def get_failures(self, request, credentials=None) -> int:
        pair_attempts, client_attempts = self.get_user_attempts(request, credentials)
        pair_limit, client_limit = settings.AXES_FAILURE_LIMIT, settings.PLANTS_ADMIN_CLIENT_LOGIN_FAILURES
        # The client's count scaled onto the pair's limit: floor(n * pair / client) >= pair exactly
        # when n >= client, so axes' one comparison applies both limits.
        return max(_failures(pair_attempts), _failures(client_attempts) * pair_limit // client_limit)

    def reset_user_attempts(self, request, credentials=None) -> int:
        # A login clears that user's failures from that client only. axes' own reset also clears
        # the client's: whoever owns one account could then guess another's password without end,
        # a few guesses between each of its own logins.
        pair_attempts = self.filter_user_attempts(request, credentials)[0]
        count, _ = pair_attempts.delete()
        return count
