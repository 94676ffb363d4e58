"""One error hierarchy; each error carries the process exit code the CLI uses."""


class TraceanaError(Exception):
    """Base class: a user-facing problem with a one-line message."""

    exit_code = 2


class BadInput(TraceanaError):
    """The input file or an option cannot be used (exit code 2)."""

    exit_code = 2


class GateFailed(TraceanaError):
    """A --fail-on condition tripped (exit code 1)."""

    exit_code = 1
