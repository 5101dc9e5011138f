"""The Django admin: browsing plants, and issuing and revoking API tokens."""

import re
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers
from django.utils.functional import cached_property
from django.utils.html import format_html

from plants.models import ApiToken, Plant, TokenStatus
from plants.services import token_issue, tokens_revoke

# Below this many rows an exact COUNT(*) is cheap enough; above it an unfiltered list uses
# PostgreSQL's own estimate, so paging through a million plants never counts them all.
EXACT_COUNT_UP_TO = 10_000
# A whole number the id column can hold: ASCII digits only (str.isdigit() also takes "²", which int()
# refuses), and at most 19 of them, so int() never meets Python's limit on long digit strings.
WHOLE_NUMBER = re.compile(r"-?[0-9]{1,19}")
BIGINT_RANGE = range(-(2**63), 2**63)


class EstimatedCountPaginator(Paginator):
    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        connection = connections[queryset.db]
        if connection.vendor == "postgresql" and not queryset.query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [queryset.model._meta.db_table]
                )
                row = cursor.fetchone()
            if row and row[0] > EXACT_COUNT_UP_TO:
                return row[0]
        return super().count


@admin.register(Plant)
class PlantAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tag", "created_at"]
    list_filter = ["tag", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["name", "tag"]
    search_help_text = "Name or tag contains the text; a whole number also finds the plant with that id."
    date_hierarchy = "created_at"
    list_per_page = 50
    paginator = EstimatedCountPaginator
    show_full_result_count = False  # "3 results (1,000,000 total)" would count the table

    def get_readonly_fields(self, request, obj=None):
        # The id is the client's identity of the plant: chosen once, when it is added.
        return ["id", "created_at"] if obj is not None else ["created_at"]

    def get_search_results(self, request, queryset, search_term):
        matches, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if WHOLE_NUMBER.fullmatch(term) and int(term) in BIGINT_RANGE:
            matches |= queryset.filter(id=int(term))
        return matches, may_have_duplicates


class TokenStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return TokenStatus.choices

    def queryset(self, request, queryset):
        if self.value() == TokenStatus.ACTIVE:
            return queryset.active()
        if self.value() == TokenStatus.EXPIRED:
            return queryset.expired()
        if self.value() == TokenStatus.REVOKED:
            return queryset.revoked()
        return queryset


class IssueTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Who or what will hold the token, e.g. 'billing-service'.")
    expires_in_days = forms.IntegerField(
        min_value=1, required=False, label="Expires in (days)", help_text="Leave empty for a token that never expires."
    )


STATUS_STYLES = {
    TokenStatus.ACTIVE: "color: #1a7f37",
    TokenStatus.EXPIRED: "color: #9a6700",
    TokenStatus.REVOKED: "color: #cf222e",
}


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "created_at", "expires_at", "last_used_at", "status_badge"]
    list_filter = [TokenStatusFilter]
    search_fields = ["name", "prefix"]
    fields = ["name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke_tokens"]

    def lookup_allowed(self, lookup, value, request=None) -> bool:
        # ?digest__startswith=ab would let an operator's browser (or a forged link) learn a token's
        # digest one character at a time: no filter on it, of any kind.
        if lookup.split("__")[0] == "digest":
            return False
        return super().lookup_allowed(lookup, value, request)

    @admin.display(description="status")
    def status_badge(self, token: ApiToken) -> str:
        status = token.status()
        return format_html('<strong class="token-{}" style="{}">{}</strong>', status, STATUS_STYLES[status], status)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        revoked = tokens_revoke(tokens=queryset)
        self.message_user(request, f"Revoked {revoked} token(s); they are refused from the next request on.")

    def add_view(self, request, form_url="", extra_context=None):
        """Issue a token: its secret is shown on this one page and never again (only a digest is stored)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = IssueTokenForm(request.POST or None)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Issue API token"}
        if request.method == "POST" and form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            token, secret = token_issue(
                name=form.cleaned_data["name"], expires_in=timedelta(days=days) if days else None
            )
            self.log_addition(request, token, [{"added": {}}])
            response = TemplateResponse(
                request, "admin/plants/apitoken/issued.html", {**context, "token": token, "secret": secret}
            )
            add_never_cache_headers(response)  # the page holds the secret: no cache may keep it
            messages.info(request, f"Issued token {token.prefix}… for {token.name!r}.")
            return response
        return TemplateResponse(request, "admin/plants/apitoken/issue.html", {**context, "form": form})
