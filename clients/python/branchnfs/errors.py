"""Exceptions of the branchnfs client: one class per API error code."""

__all__ = [
    "BranchnfsError", "NoServer", "NotFound", "Exists", "InvalidName",
    "Invalidated", "Conflict", "HasChildren", "ReadOnly", "NoSpace",
    "BadRequest", "Internal", "InUse", "Unauthorized", "OutsideBranch",
    "NoMatch", "NotUnique", "error_for",
]


class BranchnfsError(Exception):
    """An error answered by the server (or no answer at all).

    code is the API's stable error code ("not_found", "conflict", ...),
    status the HTTP status, detail the whole error object.
    """

    code = "internal"

    def __init__(self, message, status=0, detail=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.detail = detail or {}

    @property
    def branch(self):
        return self.detail.get("branch")


class NoServer(BranchnfsError):
    """No branchnfs server answers on the store's control socket."""

    code = "no_server"


class NotFound(BranchnfsError):
    code = "not_found"


class Exists(BranchnfsError):
    code = "exists"


class InvalidName(BranchnfsError):
    code = "invalid_name"


class Invalidated(BranchnfsError):
    """The branch was invalidated (a sibling committed first), committed or
    aborted. invalidated_by names the commit, when there was one."""

    code = "invalidated"

    @property
    def invalidated_by(self):
        return self.detail.get("invalidated_by")


class Conflict(BranchnfsError):
    """The commit found paths changed in the branch and in its parent."""

    code = "conflict"

    @property
    def paths(self):
        return self.detail.get("paths", [])


class HasChildren(BranchnfsError):
    code = "has_children"

    @property
    def children(self):
        return self.detail.get("children", [])


class InUse(BranchnfsError):
    """NFS clients use the branch: commit or abort it with force=True."""

    code = "in_use"

    @property
    def clients(self):
        return self.detail.get("clients", [])


class ReadOnly(BranchnfsError):
    code = "read_only"


class NoSpace(BranchnfsError):
    code = "no_space"


class BadRequest(BranchnfsError):
    code = "bad_request"


class Unauthorized(BranchnfsError):
    """The request carried no API token, or a wrong one: the token is in the
    server's STORE/control.token."""

    code = "unauthorized"


class OutsideBranch(BranchnfsError):
    """A file path is absolute, has a ".." component, or follows a symlink
    out of the branch."""

    code = "outside_branch"


class NoMatch(BranchnfsError):
    """An edit's old string does not occur in the file."""

    code = "no_match"


class NotUnique(BranchnfsError):
    """An edit's old string occurs more than once (use replace_all)."""

    code = "not_unique"


class Internal(BranchnfsError):
    code = "internal"


_BY_CODE = {c.code: c for c in (NotFound, Exists, InvalidName, Invalidated,
                                Conflict, HasChildren, InUse, ReadOnly, NoSpace,
                                BadRequest, Unauthorized, OutsideBranch, NoMatch,
                                NotUnique, Internal)}


def error_for(status, body):
    """Build the exception for an error answer (status, decoded body)."""
    detail = body.get("error", {}) if isinstance(body, dict) else {}
    cls = _BY_CODE.get(detail.get("code"), Internal)
    return cls(detail.get("message") or "HTTP %d" % status, status, detail)
