"""Running one command: parsing, the command, and its exit code (0 success, 1 the operation
failed, 2 the command line is wrong, 130 interrupted, 128 + the signal that stopped ``serve``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import traceback
from collections.abc import Sequence
from typing import TextIO

from .. import InvalidArgumentError, YdbTopicError
from .commands import COMMANDS
from .failures import CommandFailure, Signalled, UsageFailure
from .output import fail, one_line
from .parser import build_parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on mistakes (2)
        return exc.code if isinstance(exc.code, int) else 2
    stream = out or sys.stdout
    try:
        asyncio.run(COMMANDS[args.command](args, stream))
    except (UsageFailure, InvalidArgumentError) as exc:
        # InvalidArgumentError: the SDK refused a value taken from the command line.
        usage: argparse.ArgumentParser = args.usage
        usage.print_usage(sys.stderr)
        print(f"{usage.prog}: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Signalled as exc:
        return 128 + exc.signum
    except CommandFailure as exc:
        fail(str(exc))
    except YdbTopicError as exc:
        fail(f"{type(exc).__name__}: {one_line(exc)}")
    except OSError as exc:
        fail(one_line(exc))
    except (Exception, asyncio.CancelledError) as exc:
        if args.traceback:
            traceback.print_exc()
        fail(f"unexpected {type(exc).__name__}: {one_line(exc) or '(no message)'} (--traceback shows where)")
    else:
        return 0
    return 1

