"""Command-line plumbing shared by the runners: one clear line and a non-zero exit on bad input.

Library code raises ``CliError`` (or ``ValueError`` from a config) with a message meant for a
person; ``run_main`` prints it as ``<prog>: error: <message>`` and exits with status 2, never with
a traceback. A bug (any other exception) still shows its traceback, because that is what a
developer needs to fix it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence


class CliError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def run_main(main: Callable[[Sequence[str] | None], int | None], prog: str) -> None:
    """Call ``main(sys.argv[1:])`` and turn user errors into one line and exit status 2."""
    try:
        code = main(sys.argv[1:])
    except CliError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(code or 0)
