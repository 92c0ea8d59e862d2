"""patchkit: a generic engine that keeps a series of git-format patches and drop-in
overlay files on top of pinned upstream release artifacts (wheels).

It knows nothing about the project it patches: everything upstream-specific lives in
pin.lock and in the patch headers.
"""


class PatchkitError(Exception):
    """A user-facing failure: its message is one line naming what was expected and found."""


class UsageError(PatchkitError):
    """A command line that names no valid operation: exit status 2, like argparse's own usage errors."""
