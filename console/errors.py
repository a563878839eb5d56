"""The console's one error tree; :mod:`console.app` turns each into a JSON answer with its
``status`` (and never a traceback)::

    ConsoleError            500  anything the console itself did not expect
    ├── BadInput            400  a query or form value that cannot be used
    ├── ReadOnly            403  a write to a console started without --allow-writes
    ├── NotFound            404  an unknown cluster or key
    └── Unreachable         503  no endpoint of the cluster answered
"""

from __future__ import annotations

__all__ = ["BadInput", "ConsoleError", "NotFound", "ReadOnly", "Unreachable"]


class ConsoleError(Exception):
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadInput(ConsoleError):
    status = 400


class ReadOnly(ConsoleError):
    status = 403


class NotFound(ConsoleError):
    status = 404


class Unreachable(ConsoleError):
    status = 503
