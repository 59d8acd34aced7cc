"""The exceptions ckptdb raises.

Every error of the engine is a :class:`CheckpointError` (or a subclass that
is also the matching Python built-in, so ``except ValueError`` works for bad
arguments). A save or load that failed on one or more ranks raises the same
error, with the same text, on every rank; ``rank_failures`` maps each failed
rank to its own message.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "InvalidArgumentError",
    "NotFoundError",
    "AlreadyExistsError",
    "DataLossError",
    "TimeoutError_",
]


class CheckpointError(Exception):
    """A ckptdb operation failed.

    Attributes:
        code: the engine's status code name ("InvalidArgument", "NotFound",
            "AlreadyExists", "FailedPrecondition", "DataLoss", "Unavailable",
            "DeadlineExceeded", "Aborted", "IOError", "Internal").
        message: the message without the code.
        rank_failures: {rank: message} for a save or load that failed on
            some ranks (empty for an error of this process alone).
        rank_codes: {rank: code name} for the same ranks.
    """

    def __init__(self, text: str, code: str = "Internal", message: str = "",
                 rank_failures: dict[int, str] | None = None,
                 rank_codes: dict[int, str] | None = None) -> None:
        super().__init__(text)
        self.code = code
        self.message = message or text
        self.rank_failures: dict[int, str] = dict(rank_failures or {})
        self.rank_codes: dict[int, str] = dict(rank_codes or {})


class InvalidArgumentError(CheckpointError, ValueError):
    """The call's arguments are wrong (also a ValueError)."""


class NotFoundError(CheckpointError, LookupError):
    """The step, tag, entry or store does not exist (also a LookupError)."""


class AlreadyExistsError(CheckpointError):
    """The step is already committed: pick another step number."""


class DataLossError(CheckpointError):
    """Stored bytes are corrupt (checksum mismatch, unreadable metadata)."""


class TimeoutError_(CheckpointError, TimeoutError):
    """A rank did not answer within the timeout (also a TimeoutError)."""


_BY_CODE = {
    "InvalidArgument": InvalidArgumentError,
    "NotFound": NotFoundError,
    "AlreadyExists": AlreadyExistsError,
    "DataLoss": DataLossError,
    "DeadlineExceeded": TimeoutError_,
}


def _from_status(code: str, message: str, text: str,
                 failures: dict[int, tuple[str, str]]) -> CheckpointError:
    """Called by the extension to make the exception for a failed Status."""
    cls = _BY_CODE.get(code, CheckpointError)
    return cls(text, code=code, message=message,
               rank_failures={r: t for r, (_, t) in failures.items()},
               rank_codes={r: c for r, (c, _) in failures.items()})
