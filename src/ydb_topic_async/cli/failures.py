"""How a command ends other than by succeeding: each kind has its exit code (see ``main``)."""

from __future__ import annotations


class UsageFailure(Exception):
    """A command-line mistake found after parsing (exit code 2)."""


class CommandFailure(Exception):
    """The operation failed for a reason the message explains in full (exit code 1)."""


class Signalled(Exception):
    """The command stopped cleanly on a signal: exit with 128 + its number, as a shell does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

