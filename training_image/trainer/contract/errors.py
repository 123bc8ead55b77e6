"""Failures the trainer explains.

Every error the trainer can name derives from :class:`TrainerError`; its message is written
verbatim to ``output/failure`` (SageMaker shows it as the job's FailureReason), so it says
what went wrong, where, and what to do about it in one paragraph.
"""

from __future__ import annotations


class TrainerError(Exception):
    """A failure with a message written for the operator.

    Attributes:
        exit_code: Process exit status for this kind of failure (always non-zero).
    """

    exit_code: int = 1


class ConfigError(TrainerError):
    """A hyperparameter or environment variable is missing, unknown or invalid."""

    exit_code = 2


class GpuCheckError(TrainerError):
    """The GPUs TensorFlow sees do not match what the job expects, or do not work."""

    exit_code = 3


class NetworkCheckError(GpuCheckError):
    """The instance type has EFA but NCCL would not use it (plugin not loadable, no EFA provider).

    A GPU check failure in kind (same exit status): the job would run, over TCP sockets, on less
    than the hardware it pays for.
    """


class RendezvousError(TrainerError):
    """The workers of a multi-host job could not all meet within the timeout."""

    exit_code = 4


class PeerFailedError(TrainerError):
    """Another worker of a multi-host job died or stopped during a collective (all-reduce)."""

    exit_code = 10


class DataError(TrainerError):
    """An input channel is missing, empty or holds a malformed record."""

    exit_code = 5


class TrainingDivergedError(TrainerError):
    """The loss became NaN or infinite."""

    exit_code = 6


class CheckpointError(TrainerError):
    """A checkpoint exists but cannot be restored into this model, or workers disagree."""

    exit_code = 7


class TrainingInterrupted(TrainerError):
    """SIGTERM arrived (spot interruption, job stop); completed epochs are checkpointed."""

    exit_code = 143  # 128 + SIGTERM, what a shell reports for a process killed by TERM


class UserScriptError(TrainerError):
    """The user's training script raised, exited non-zero or was killed."""

    exit_code = 8

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class SourceError(TrainerError):
    """The user's code cannot be found, unpacked or its requirements installed (offline)."""

    exit_code = 9
