"""How every stage and CLI operation runs: logging to stderr, and our errors as one line plus an exit status.

Exit status 2: bad input or configuration (the message names file, row and field). Exit status 1: a critical
data expectation failed. Tracebacks are kept for genuine bugs. A stage that DVC runs also leaves its timing
record (guardpolicy.timing).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from guardpolicy.errors import GuardpolicyError, ValidationFailed
from guardpolicy.timing import write_stage_record

EXIT_VALIDATION = 1
EXIT_BAD_INPUT = 2


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def guarded(operation: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an operation for the command line (fire keeps the signature, so flags and help still work)."""

    @functools.wraps(operation)
    def run(*args: Any, **kwargs: Any) -> Any:
        configure_logging()
        try:
            result = operation(*args, **kwargs)
        except ValidationFailed as exc:
            print(f"validation failed: {exc}", file=sys.stderr)
            sys.exit(EXIT_VALIDATION)
        except GuardpolicyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
        # Only under DVC (DVC_STAGE set): the stage's timing record, after its outputs are complete.
        write_stage_record()
        return result

    return run
