"""The rate-limit counts in an UNLOGGED table on PostgreSQL: a count is not flushed to disk at commit,
so a token's row is held for the upsert alone, not for a disk flush (docs/decisions/rate-limit-store.md).
The price: PostgreSQL empties the table after a crash, and a promoted standby starts with it empty."""

from django.db import migrations


def set_logged(logged: bool):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return  # SQLite has no such table kind; its counts commit as everything else does
        table = schema_editor.quote_name(apps.get_model("plants", "RateLimitCounter")._meta.db_table)
        schema_editor.execute(f"ALTER TABLE {table} SET {'LOGGED' if logged else 'UNLOGGED'}")

    return operation


class Migration(migrations.Migration):
    dependencies = [
        ("plants", "0004_ratelimitcounter"),
    ]

    operations = [
        migrations.RunPython(set_logged(False), set_logged(True), elidable=False),
    ]
