"""Log formatting: every record is one line, the client's mistakes are warnings, an outage's traceback is rare."""

import logging
import threading
import time

# Every character that str.splitlines() (and so many log viewers) takes for a line break.
LINE_BREAKS = {ord(char): f"\\x{ord(char):02x}" for char in "\n\r\x0b\x0c\x1c\x1d\x1e\x85"} | {
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


class OneLineFormatter(logging.Formatter):
    """Escapes line breaks in messages, so no request can start a log line of its own.

    Messages may quote what a client sent (a path, a Host header); a traceback, which only our
    own code raises, keeps its lines.
    """

    # The last second formatted, with its text: one request log line after another mostly share it.
    _second_text: tuple[int | None, str] = (None, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """Formatter's default `2026-11-23 16:31:41,123`, the date and time formatted once per second."""
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached_second, text = self._second_text  # one tuple, read and replaced whole: safe across threads
        if cached_second != second:
            text = time.strftime(self.default_time_format, self.converter(second))
            self._second_text = (second, text)
        return self.default_msec_format % (text, record.msecs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(LINE_BREAKS)


class ClientErrorFilter(logging.Filter):
    """For django.security's records (a disallowed Host, a refused admin lookup): the client's
    error, already answered with a 400, so a one-line WARNING without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info = record.exc_text = None
        return True


# An outage fails every request the same way: its traceback at most this often per distinct error.
TRACEBACK_INTERVAL = 60.0
# Distinct errors remembered at most; past it, those whose interval is over are forgotten.
REMEMBERED_ERRORS = 256
# The clock of the interval; tests move it instead of waiting a minute.
clock = time.monotonic
last_traceback: dict[tuple[str, str], float] = {}
last_traceback_lock = threading.Lock()


def traceback_due(error: BaseException) -> bool:
    """True for the first occurrence of this error (its class and message) in TRACEBACK_INTERVAL, in this process."""
    key, now = (f"{type(error).__module__}.{type(error).__qualname__}", str(error)), clock()
    with last_traceback_lock:
        last = last_traceback.get(key)
        if last is not None and now - last < TRACEBACK_INTERVAL:
            return False
        if len(last_traceback) >= REMEMBERED_ERRORS:
            for old_key, when in list(last_traceback.items()):
                if now - when >= TRACEBACK_INTERVAL:
                    del last_traceback[old_key]
            if len(last_traceback) >= REMEMBERED_ERRORS:  # that many distinct errors in a minute
                last_traceback.clear()
        last_traceback[key] = now
        return True


def log_outage(logger: logging.Logger, message: str, *args, error: BaseException) -> None:
    """logger.error(message % args): with `error`'s traceback once a minute per distinct error, else one line.

    While a dependency is down every request meets the same error; its traceback says all there is
    to say the first time, and thousands of copies would bury the rest of the log.
    """
    if traceback_due(error):
        logger.error(message, *args, exc_info=error)
    else:
        logger.error(f"{message} (its traceback was logged within the last %d s)", *args, TRACEBACK_INTERVAL)
