"""`manage.py token issue|revoke|list`: manage the API's bearer tokens."""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from plants.models import ApiToken
from plants.services import token_issue, tokens_revoke


class Command(BaseCommand):
    help = "Issue, revoke and list API bearer tokens. Only digests are stored: a secret is shown once."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{issue,revoke,list}")
        issue = actions.add_parser("issue", help="Issue a token; print the secret alone on stdout.")
        issue.add_argument("name", help="Who or what will hold the token, e.g. 'billing-service'.")
        issue.add_argument(
            "--expires-in", type=int, metavar="DAYS", help="Expire DAYS whole days after issue (default: never)."
        )
        revoke = actions.add_parser("revoke", help="Revoke every active token of a name.")
        revoke.add_argument("name")
        actions.add_parser("list", help="List tokens: name, prefix, dates and status; never a secret.")

    def handle(self, *args, action: str, **options):
        return getattr(self, f"handle_{action}")(**options)

    def handle_issue(self, *, name: str, expires_in: int | None, **options):
        name = name.strip()
        if not name or len(name) > ApiToken._meta.get_field("name").max_length:
            raise CommandError("NAME must be 1 to 100 characters.")
        if expires_in is not None and expires_in <= 0:
            raise CommandError("--expires-in must be a positive number of days.")
        token, secret = token_issue(name=name, expires_in=timedelta(days=expires_in) if expires_in else None)
        expiry = f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else "never expires"
        self.stderr.write(f"Issued token {token.prefix}… for {name!r} ({expiry}). It is shown only once:")
        self.stdout.write(secret)

    def handle_revoke(self, *, name: str, **options):
        name = name.strip()  # as issue stores it
        revoked = tokens_revoke(tokens=ApiToken.objects.filter(name=name))
        if not revoked:
            raise CommandError(f"No active token named {name!r}.")
        self.stderr.write(f"Revoked {revoked} token(s) named {name!r}.")

    def handle_list(self, **options):
        now = timezone.now()
        columns = "{:<24} {:<13} {:<17} {:<17} {:<17} {}"
        self.stdout.write(columns.format("NAME", "PREFIX", "CREATED", "EXPIRES", "LAST USED", "STATUS"))
        for token in ApiToken.objects.all():
            self.stdout.write(
                columns.format(
                    token.name,
                    token.prefix,
                    _when(token.created_at),
                    _when(token.expires_at),
                    _when(token.last_used_at),
                    token.status(now),
                )
            )


def _when(moment) -> str:
    return f"{moment:%Y-%m-%d %H:%M}" if moment else "-"
