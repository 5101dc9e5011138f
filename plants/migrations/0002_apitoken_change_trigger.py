"""PostgreSQL: NOTIFY every change to a token that authentication could see.

Connections that cache tokens (plants/token_cache.py) LISTEN on this channel and forget a token
when its digest arrives; an empty payload (after a TRUNCATE) forgets them all. Updates of
`last_used_at` alone are not announced: authentication writes it itself, at most once a minute.
Other databases keep no token cache, so there is nothing to do there.
"""

from django.db import migrations

CREATE_FUNCTION = """
CREATE FUNCTION plants_apitoken_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('plants_apitoken_changed', '');
    ELSE
        PERFORM pg_notify('plants_apitoken_changed', OLD.digest);
    END IF;
    RETURN NULL;
END
$$"""
CREATE_CHANGED_TRIGGER = """
CREATE TRIGGER plants_apitoken_changed
    AFTER UPDATE OF name, digest, expires_at, revoked_at OR DELETE ON plants_apitoken
    FOR EACH ROW EXECUTE FUNCTION plants_apitoken_notify_change()"""
CREATE_TRUNCATED_TRIGGER = """
CREATE TRIGGER plants_apitoken_truncated
    AFTER TRUNCATE ON plants_apitoken
    FOR EACH STATEMENT EXECUTE FUNCTION plants_apitoken_notify_change()"""
# One statement per string: a prepared (server-side bound) statement holds only one.
CREATE = [CREATE_FUNCTION, CREATE_CHANGED_TRIGGER, CREATE_TRUNCATED_TRIGGER]

DROP = [
    "DROP TRIGGER plants_apitoken_truncated ON plants_apitoken",
    "DROP TRIGGER plants_apitoken_changed ON plants_apitoken",
    "DROP FUNCTION plants_apitoken_notify_change()",
]


def run_on_postgresql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for sql in statements:
                schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("plants", "0001_initial")]

    operations = [migrations.RunPython(run_on_postgresql(CREATE), run_on_postgresql(DROP))]
