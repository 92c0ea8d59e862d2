"""`apply.py rebase`: carry every series to a new upstream release.

run.py drives the command (start, replay loop, --continue, --abort, the refresh); replay.py replays one
series in a scratch git repo and classifies each patch; state.py is the typed state saved between runs;
backup.py keeps what the refresh rewrites restorable byte for byte.
"""
