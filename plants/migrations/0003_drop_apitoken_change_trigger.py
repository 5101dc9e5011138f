"""PostgreSQL: drop the token-change trigger of migration 0002.

It fed a per-connection token cache that is gone: every request now reads its token's row, so a
revoked or expired token is refused from the first request that starts after the change commits,
whatever sits between the app and the database. Reversing re-creates the trigger.
"""

import importlib

from django.db import migrations

trigger = importlib.import_module("plants.migrations.0002_apitoken_change_trigger")

DROP_IF_EXISTS = [
    "DROP TRIGGER IF EXISTS plants_apitoken_truncated ON plants_apitoken",
    "DROP TRIGGER IF EXISTS plants_apitoken_changed ON plants_apitoken",
    "DROP FUNCTION IF EXISTS plants_apitoken_notify_change()",
]


class Migration(migrations.Migration):
    dependencies = [("plants", "0002_apitoken_change_trigger")]

    operations = [
        migrations.RunPython(trigger.run_on_postgresql(DROP_IF_EXISTS), trigger.run_on_postgresql(trigger.CREATE))
    ]
