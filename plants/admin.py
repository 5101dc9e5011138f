"""The Django admin: browsing plants, and issuing and revoking API tokens."""

from django.contrib import admin

from plants.models import ApiToken, Plant


@admin.register(Plant)
class PlantAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tag", "created_at"]
    search_fields = ["name", "tag"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
