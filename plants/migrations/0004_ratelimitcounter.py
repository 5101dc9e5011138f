from django.db import migrations, models


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
    ]
