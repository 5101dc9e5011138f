"""The settings file DJANGO_ENV_FILE names: `NAME=value` lines, blank lines and `#` comments.

django-environ reads it for the settings (plantstore_site/settings.py) and for a unit's supervisor
(deploy/processes.py: with_env_file), but it reads a file it cannot open as an empty one, and skips a
line it cannot parse, both without a word: a moved file, or a `NAME = value` line (which systemd's
EnvironmentFile= would read), would drop a setting, an admin client list say, from a start or a
reload. So the file is checked first, by this one rule, and refused naming the file and the line
(never the value: it may be a secret). The systemd install's release checks its settings file by the
same rule (`python -m plantstore_site.env_file FILE`, deploy/plantstore-release) before it changes anything.
"""

import re
import sys
from pathlib import Path

# A line django-environ reads as a setting (its own pattern); with spaces, systemd reads it, it does not.
SETTING = re.compile(r"\A(?:export )?[A-Za-z_0-9]+=")
SPACED_SETTING = re.compile(r"\A\s*(?:export\s+)?([A-Za-z_][A-Za-z_0-9]*)\s*=")


def problem(path: str) -> str | None:
    """Why the settings file at `path` cannot be read as written, in one line naming it; None when it can."""
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        return f"{path} cannot be read ({error.strerror})"
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n") + 1
        return f"{path}, line {line}, is not UTF-8 (save the file as UTF-8)"
    if text.startswith("\ufeff"):  # a byte order mark, which an editor may write first: line 1 would be skipped
        return f"{path} begins with a byte order mark (save the file as UTF-8 without one)"
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#") or SETTING.match(line):
            continue
        if spaced := SPACED_SETTING.match(line):
            return f"{path}, line {number} ({spaced[1]}), is not NAME=value: no space before the name or around ="
        return f"{path}, line {number}, is not NAME=value, a # comment or blank"
    return None


if __name__ == "__main__":
    # python -m plantstore_site.env_file FILE: silent and 0 when FILE can be read as written; else the reason, 1.
    if reason := problem(sys.argv[1]):
        sys.exit(reason)
