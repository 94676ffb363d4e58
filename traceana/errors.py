"""One error hierarchy; each error carries the process exit code the CLI uses."""


class TraceanaError(Exception):
    """Base class: a user-facing problem with a one-line message."""

    exit_code = 2


class BadInput(TraceanaError):
    """The input file or an option cannot be used (exit code 2)."""

    exit_code = 2


class Incomplete(TraceanaError):
    """The run could not finish its work (a rank's worker process died twice); the report was
    written with what could be done and names what is missing (exit code 3)."""

    exit_code = 3


class GateFailed(TraceanaError):
    """A --fail-on condition tripped (exit code 1)."""

    exit_code = 1
