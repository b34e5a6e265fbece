"""Structured logging: one JSON object per line (or plain text for humans).

Timestamps are RFC 3339 in UTC with milliseconds (``2026-12-01T21:15:08.123Z``)
so lines from several pods sort and compare as text. Lines at INFO and above
never carry a traceback or a source path: :class:`NoTracebacks` turns an
attached exception into its type and message, and the traceback goes to a
DEBUG line of its own (shown only with ``log_level = "DEBUG"``).

Lines are written by a thread of their own (:class:`StderrWriter`): a stderr
that is slow or not read at all never stalls the event loop; past a bounded
backlog lines are dropped and the count is logged once writing catches up.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import sys
import threading
import time

from pythonjsonlogger.json import JsonFormatter

#: Absolute file paths in an exception's message (not URLs: those have ``//``).
_PATH = re.compile(r"(?<![\w:/.])/(?:[\w.+-]+/)+[\w.+-]*")


def rfc3339(created: float) -> str:
    """``created`` (epoch seconds) as RFC 3339 UTC with milliseconds and ``Z``."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class _Rfc3339:
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return rfc3339(record.created)


class Json(_Rfc3339, JsonFormatter):
    pass


class Text(_Rfc3339, logging.Formatter):
    pass


def describe(exc: BaseException) -> str:
    """An exception as one line: type and message, file paths replaced."""
    text = " ".join(str(exc).split())
    text = _PATH.sub("<path>", text)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class NoTracebacks(logging.Filter):
    """Keeps tracebacks and stack dumps out of lines at INFO and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.INFO or not (record.exc_info or record.stack_info):
            return True
        exc_info, record.exc_info, record.exc_text = record.exc_info, None, None
        record.stack_info = None
        if exc_info and exc_info[1] is not None:
            record.error = describe(exc_info[1])
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("traceback of the error logged next", exc_info=exc_info)
        return True


def json_formatter() -> Json:
    """One object per line: ``ts``, ``level``, ``logger``, ``message`` and extras."""
    return Json(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "asctime": "ts", "name": "logger"},
    )


class StderrWriter(logging.Handler):
    """Formats on the caller's thread and writes from its own, with ``os.write``
    (no Python-level lock a stuck write could hold at exit)."""

    def __init__(self, fd: int, backlog: int = 10_000) -> None:
        super().__init__()
        self._fd = fd
        self._queue: queue.Queue[bytes] = queue.Queue(backlog)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - logging must not fail the caller
            self.handleError(record)
            return
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            data = self._queue.get()
            try:
                if self.dropped:
                    dropped, self.dropped = self.dropped, 0
                    note = logging.LogRecord(
                        __name__, logging.WARNING, "", 0, "log lines dropped", None, None
                    )
                    note.dropped = dropped
                    data = (self.format(note) + "\n").encode() + data
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError:
                pass  # stderr closed: nothing to tell
            finally:
                self._queue.task_done()

    def flush(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` s) for queued lines to be written."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)


def setup(level: str = "INFO", fmt: str = "json") -> None:
    handler = StderrWriter(sys.stderr.fileno())
    if fmt == "json":
        handler.setFormatter(json_formatter())
    else:
        handler.setFormatter(Text("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(NoTracebacks())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Third-party loggers chatter at INFO/DEBUG and can echo request details.
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "mcp", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # grpc's Python side (and asyncio, which reports callbacks grpc.aio
    # schedules) log through the root handler above, as JSON.
    for name in ("grpc", "grpc._cython", "asyncio"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
        logger.setLevel(max(root.level, logging.WARNING))
