"""Exceptions raised by accl, one class per C result code (acclResult_t).

The compiled module raises ``from_code(code)(message)``, so every class takes the message as
its only argument and carries its code as the class attribute ``code``. Where a builtin
exception means the same thing, the class also derives from it, so ``except TimeoutError``
or ``except ValueError`` work as Python users expect.

This module imports nothing from accl, so it stays importable without the compiled module.
"""

from __future__ import annotations

import builtins

__all__ = [
    "AcclError",
    "DeviceError",
    "SystemError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidUsageError",
    "RemoteError",
    "InProgressError",
    "TimeoutError",
    "NotSupportedError",
    "from_code",
]


class AcclError(Exception):
    """Base class of accl's errors; ``code`` is the acclResult_t value (-1: not a known code)."""

    code: int = -1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DeviceError(AcclError):
    """The device runtime (CUDA, HIP, ...) failed (acclUnhandledDeviceError)."""

    code = 1


class SystemError(AcclError, builtins.OSError):  # noqa: A001 - mirrors acclSystemError
    """A system call failed: shared memory, sockets, dlopen (acclSystemError)."""

    code = 2


class InternalError(AcclError):
    """A bug in accl or a backend (acclInternalError)."""

    code = 3


class InvalidArgumentError(AcclError, ValueError):
    """A bad buffer, count, type, op, root or peer (acclInvalidArgument)."""

    code = 4


class InvalidUsageError(AcclError, RuntimeError):
    """A call that is not valid now: destroyed communicator, group misuse (acclInvalidUsage)."""

    code = 5


class RemoteError(AcclError, ConnectionError):
    """A peer failed, disconnected or disagreed (acclRemoteError)."""

    code = 6


class InProgressError(AcclError):
    """A non-blocking communicator is still being set up (acclInProgress)."""

    code = 7


class TimeoutError(AcclError, builtins.TimeoutError):  # noqa: A001 - mirrors acclTimeout
    """The communicator's timeout expired (acclTimeout)."""

    code = 8


class NotSupportedError(AcclError, NotImplementedError):
    """The backend does not offer this operation or type (acclNotSupported)."""

    code = 9


_BY_CODE: dict[int, type[AcclError]] = {
    cls.code: cls
    for cls in (
        DeviceError,
        SystemError,
        InternalError,
        InvalidArgumentError,
        InvalidUsageError,
        RemoteError,
        InProgressError,
        TimeoutError,
        NotSupportedError,
    )
}


def from_code(code: int) -> type[AcclError]:
    """The exception class for an acclResult_t; AcclError itself for a code it does not know."""
    return _BY_CODE.get(code, AcclError)
