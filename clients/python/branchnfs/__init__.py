"""Python client of branchnfs: branches of a workspace, and attempts run in
them, through the server's control socket. Standard library only.

    import branchnfs
    ws = branchnfs.Workspace.connect()
    with ws.branch("try-1") as b:          # fork main; commit on success
        rec = b.run(["make", "test"], timeout=600)
        if rec["exit_code"] != 0:
            raise RuntimeError("tests failed")  # abort
"""

from .client import Branch, Workspace, default_store
from .errors import (BadRequest, BranchnfsError, Conflict, Exists,
                     HasChildren, InUse, Internal, Invalidated, InvalidName,
                     NoMatch, NoServer, NoSpace, NotFound, NotUnique,
                     OutsideBranch, ReadOnly, Unauthorized)

__all__ = [
    "Workspace", "Branch", "default_store",
    "BranchnfsError", "NoServer", "NotFound", "Exists", "InvalidName",
    "Invalidated", "Conflict", "HasChildren", "InUse", "ReadOnly", "NoSpace",
    "BadRequest", "Internal", "Unauthorized", "OutsideBranch", "NoMatch",
    "NotUnique",
]

__version__ = "0.1.0"
