from django.db import migrations, models


def unlogged_on_postgresql(logged: bool):
    """On PostgreSQL the counts are an UNLOGGED table: no write-ahead log for the upsert every request
    makes. A crash empties it (every token's count starts again) and a standby does not have it (after
    a failover the counts start again): a rate limit's counts are disposable."""

    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"ALTER TABLE plants_ratelimitcounter SET {'LOGGED' if logged else 'UNLOGGED'}")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("plants", "0003_drop_apitoken_change_trigger"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateLimitCounter",
            fields=[
                (
                    "key",
                    models.CharField(help_text="The token's digest.", max_length=64, primary_key=True, serialize=False),
                ),
                (
                    "window_start",
                    models.BigIntegerField(help_text="The window counted: its start, in seconds since the epoch."),
                ),
                ("count", models.PositiveIntegerField()),
            ],
        ),
        migrations.RunPython(unlogged_on_postgresql(logged=False), unlogged_on_postgresql(logged=True)),
    ]
