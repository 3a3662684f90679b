"""The control-socket client: Workspace and Branch."""

import base64
import http.client
import json
import os
import socket
import sys
from urllib.parse import quote

from .errors import BranchnfsError, NoServer, NotFound, Unauthorized, error_for

__all__ = ["Workspace", "Branch", "default_store"]

SOCKET_NAME = "control.sock"
TOKEN_NAME = "control.token"

# A long poll asks the server to hold the answer this long (seconds).
_POLL = 30


def default_store():
    """The store directory: $BRANCHNFS_STORE, else the per-user default of
    branchnfs (as the CLI finds it)."""
    d = os.environ.get("BRANCHNFS_STORE")
    if d:
        return os.path.abspath(d)
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Application Support/branchnfs")
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "branchnfs")
    return os.path.expanduser("~/.local/share/branchnfs")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("branchnfs", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def _seconds_ms(s):
    if s is None:
        return None
    return int(s * 1000)


class Workspace:
    """A branchnfs store, reached through its server's control socket.

    Every request carries the server's API token: token if given, else the
    one in STORE/control.token (read when first needed)."""

    def __init__(self, store, timeout=30.0, token=None):
        self.store = store
        self.socket = os.path.join(store, SOCKET_NAME)
        self.timeout = timeout
        self._token = token

    def _headers(self):
        if self._token is None:
            try:
                with open(os.path.join(self.store, TOKEN_NAME)) as f:
                    self._token = f.read().strip()
            except FileNotFoundError:
                return {}  # the server answers 401, saying where the token is
            except http.client.IncompleteRead as e:
                raise BranchnfsError("the server cut its answer to %s %s short (%d bytes read): "
                                     "see the server's log" % (method, path, len(e.partial)), 500) from None
            except PermissionError as e:
                raise Unauthorized("%s (the API token is only readable by the store's owner)" % e, 401) from None
        return {"Authorization": "Bearer " + self._token}

    @classmethod
    def connect(cls, store=None, timeout=30.0):
        """Connect to the server of store (default: default_store()). Raises
        NoServer when none answers."""
        ws = cls(os.path.abspath(store) if store else default_store(), timeout)
        ws.status()
        return ws

    # -- transport

    def _request(self, method, path, body=None, timeout=None, raw=False):
        want_raw = raw
        conn = _UnixConnection(self.socket, timeout or self.timeout)
        try:
            data = None
            headers = self._headers()
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (FileNotFoundError, ConnectionRefusedError) as e:
                raise NoServer("no branchnfs server answers on %s (%s): start one with `branchnfs serve`"
                               % (self.socket, e)) from None
            except PermissionError as e:
                raise NoServer("%s: %s (the control socket is only open to the store's owner)"
                               % (self.socket, e)) from None
            if want_raw and resp.status // 100 == 2:
                return raw
            try:
                out = json.loads(raw) if raw else None
            except ValueError:
                out = None
            if resp.status // 100 != 2:
                if out is None:
                    raise BranchnfsError("HTTP %d: %s" % (resp.status, raw[:200]), resp.status)
                raise error_for(resp.status, out)
            return out
        finally:
            conn.close()

    # -- branches

    def status(self):
        """The server's status (version, port, mount, ...)."""
        return self._request("GET", "/v1/status")

    def list(self):
        """Every branch the store knows, as dicts (see the CLI's list --json)."""
        return self._request("GET", "/v1/branches")

    def get(self, name):
        return self._request("GET", "/v1/branches/" + quote(name, safe=""))

    def fork(self, parent, name, checkpoint=None):
        """Fork parent (or its checkpoint) into a new branch name."""
        body = {"parent": parent, "name": name}
        if checkpoint:
            body["checkpoint"] = checkpoint
        return self._request("POST", "/v1/branches", body)

    def commit(self, name, force=False):
        """Commit name into its parent; its live siblings are invalidated.
        force commits even if NFS clients use the branch (else InUse)."""
        return self._request("POST", "/v1/branches/%s/commit" % quote(name, safe=""),
                             {"force": True} if force else None)

    def abort(self, name, force=False):
        return self._request("POST", "/v1/branches/%s/abort" % quote(name, safe=""),
                             {"force": True} if force else None)

    def set_meta(self, name, labels=None, score=None, clear_score=False, lease=None):
        """Set labels (a dict; an empty value removes a label), a score, or
        a lease in seconds (negative removes it) on live branch name."""
        body = {}
        if labels:
            body["labels"] = labels
        if score is not None:
            body["score"] = score
        if clear_score:
            body["clear_score"] = True
        if lease is not None:
            body["lease_ms"] = -1 if lease < 0 else max(1, _seconds_ms(lease))
        return self._request("PATCH", "/v1/branches/%s/meta" % quote(name, safe=""), body)

    def metas(self):
        """Labels, score and lease of every live branch that has any, by name."""
        return self._request("GET", "/v1/meta")

    def checkpoint(self, name, label):
        return self._request("POST", "/v1/branches/%s/checkpoints" % quote(name, safe=""), {"label": label})

    def restore(self, name, label):
        return self._request("POST", "/v1/branches/%s/restore" % quote(name, safe=""), {"label": label})

    def diff(self, name):
        return self._request("GET", "/v1/branches/%s/diff" % quote(name, safe=""))

    def patch(self, name, since=None):
        """What branch NAME changed since its fork (or since its checkpoint
        SINCE) as a git patch, in bytes: `git apply` applies it to a checkout
        of the fork base. .git is left out."""
        path = "/v1/branches/%s/diff?format=patch" % quote(name, safe="")
        if since:
            path += "&since=" + quote(since, safe="")
        return self._request("GET", path, raw=True)

    # -- disk space

    def space(self):
        """The store's disk space: what it occupies, the content it holds,
        what gc could give back, branches by state and each live branch's
        unique bytes (the CLI's status --json without store and server).
        It reads every key of the store once."""
        return self._request("GET", "/v1/space")

    def unique(self):
        """Each live and invalidated branch's unique bytes, a dict: what
        aborting it (and gc) gives back."""
        return self._request("GET", "/v1/space/unique")

    def gc(self, timeout=600.0):
        """Give discarded data's disk space back (the CLI's gc); returns its
        answer once done: rechunk, reclaim, pruned_refs, disk_before,
        disk_after, log_rewrites. A gc of a large store can take minutes:
        timeout is in seconds."""
        return self._request("POST", "/v1/gc", timeout=timeout)

    def branch(self, name, parent="main"):
        """A Branch to use as a context manager: forked from parent on
        entry, committed when the block ends normally, aborted when it
        raises."""
        return Branch(self, name, parent)

    @property
    def mount(self):
        """Where the server mounted the export / (serve --mount), or None."""
        return self.status().get("mount") or None

    # -- jobs: attempts the server supervises

    def start_job(self, kind, timeout=None, grace=None, **fields):
        """Start a job (kind exec, race or best_of); returns it at once.
        timeout and grace are in seconds; timeout -1 means no bound (the
        server's default is one hour)."""
        body = {"kind": kind}
        body.update({k: v for k, v in fields.items() if v is not None})
        if timeout is not None:
            body["timeout_ms"] = -1 if timeout < 0 else max(1, _seconds_ms(timeout))
        if grace is not None:
            body["grace_ms"] = max(1, _seconds_ms(grace))
        return self._request("POST", "/v1/jobs", body)

    def job(self, job_id, wait=None):
        """The job; with wait (seconds), the server holds the answer until
        the job ends or wait passes."""
        path = "/v1/jobs/" + quote(job_id, safe="")
        if wait is None:
            return self._request("GET", path)
        return self._request("GET", "%s?wait=%g" % (path, wait), timeout=wait + self.timeout)

    def wait_job(self, job_id):
        """Wait until the job ends; Ctrl-C cancels it (its attempts are
        fenced and killed) and re-raises."""
        try:
            while True:
                j = self.job(job_id, wait=_POLL)
                if j["state"] != "running":
                    break
        except KeyboardInterrupt:
            self.cancel_job(job_id)
            raise
        if j["state"] == "failed":
            err = j.get("error") or {}
            raise error_for(400, {"error": err})
        return j

    def cancel_job(self, job_id):
        """End a job: its running attempts are fenced, then killed."""
        return self._request("DELETE", "/v1/jobs/" + quote(job_id, safe=""), timeout=None)

    def jobs(self):
        return self._request("GET", "/v1/jobs")

    def events(self, job_id):
        """Yield the job's events (dicts) as they happen, until its end
        (an event of kind "done" carrying the job)."""
        conn = _UnixConnection(self.socket, None)
        try:
            conn.request("GET", "/v1/jobs/%s/events" % quote(job_id, safe=""), headers=self._headers())
            resp = conn.getresponse()
            if resp.status // 100 != 2:
                raise error_for(resp.status, json.loads(resp.read() or b"{}"))
            for line in resp:
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            conn.close()

    def run(self, branch, argv, timeout=None, on_exit="keep", grace=None):
        """Run argv in branch, supervised by the server, and return its
        record (exit_code, signal, state, killed_by, diff, ...)."""
        j = self.start_job("exec", branch=branch, argv=list(argv), on_exit=on_exit, timeout=timeout, grace=grace)
        return self.wait_job(j["id"])["records"][0]

    def race(self, parent, cmds=None, argv=None, n=None, check=None, timeout=None, grace=None):
        """Race attempts in children of parent: cmds (a list of argv), or n
        copies of argv. The first to exit 0 (and pass check) commits; the
        others are killed and aborted. Returns one record per attempt."""
        j = self.start_job("race", parent=parent, cmds=cmds, argv=list(argv) if argv else None, n=n,
                           check=list(check) if check else None, timeout=timeout, grace=grace)
        return self.wait_job(j["id"])["records"]

    def best_of(self, parent, n, argv, score_cmd=None, keep=0, no_commit=False, timeout=None, grace=None):
        """Run n attempts of argv to their end, score them (score_cmd's
        output, else what each wrote to fd 3, else its exit status) and
        commit the best, unless no_commit; keep > 0 keeps the best keep
        live instead. Returns one record per attempt."""
        j = self.start_job("best_of", parent=parent, n=n, argv=list(argv),
                           score_cmd=list(score_cmd) if score_cmd else None,
                           keep=keep or None, no_commit=no_commit or None, timeout=timeout, grace=grace)
        return self.wait_job(j["id"])["records"]


    # -- files: a branch's files without a mount (the server's copy-on-write
    # tree). Paths are relative to the branch's root; absolute paths, ".."
    # and symlinks out of the branch raise OutsideBranch.

    def _files(self, branch, op, body):
        body = {k: v for k, v in body.items() if v is not None}
        return self._request("POST", "/v1/branches/%s/files/%s" % (quote(branch, safe=""), op), body)

    def read_file(self, branch, path, offset=0, limit=None):
        """Read up to limit bytes (default 256 KiB) of a file from offset:
        a dict with size, bytes, eof and content (text) or content_base64."""
        return self._files(branch, "read", {"path": path, "offset": offset or None, "limit": limit})

    def read_bytes(self, branch, path):
        """The whole content of a file, as bytes."""
        out, off = b"", 0
        while True:
            r = self.read_file(branch, path, offset=off, limit=4 << 20)
            if "content_base64" in r:
                chunk = base64.b64decode(r["content_base64"])
            else:
                chunk = r.get("content", "").encode()
            out += chunk
            off += r["bytes"]
            if r["eof"] or not r["bytes"]:
                return out

    def write_file(self, branch, path, content, mode=None):
        """Create or replace a file with content (str or bytes), making
        missing directories; mode (e.g. 0o755) for a new file, or to change."""
        body = {"path": path, "mode": mode}
        if isinstance(content, bytes):
            body["content_base64"] = base64.b64encode(content).decode()
        else:
            body["content"] = content
        return self._files(branch, "write", body)

    def edit_file(self, branch, path, old, new, replace_all=False):
        """Replace old by new in a file. old must occur exactly once (NoMatch,
        NotUnique otherwise) unless replace_all."""
        return self._files(branch, "edit", {"path": path, "old_string": old, "new_string": new,
                                            "replace_all": replace_all or None})

    def list_files(self, branch, path="", glob=None, recursive=False, limit=None):
        """The entries (path, type, size, mode, target) of a directory; a glob
        ("*.py", "src/**/*.go") keeps the matching paths at any depth."""
        return self._files(branch, "list", {"path": path or None, "glob": glob,
                                            "recursive": recursive or None, "limit": limit})["entries"]

    def search_files(self, branch, pattern, path="", glob=None, limit=None):
        """Lines matching the Go regular expression pattern: a dict with
        matches (path, line, text) and truncated."""
        return self._files(branch, "search", {"pattern": pattern, "path": path or None, "glob": glob, "limit": limit})

    def delete_file(self, branch, path, recursive=False):
        """Delete a file, symlink or empty directory (recursive: a tree)."""
        return self._files(branch, "delete", {"path": path, "recursive": recursive or None})

    def move_file(self, branch, src, dst, overwrite=False):
        """Rename src to dst, making dst's directories; an existing dst
        raises Exists unless overwrite."""
        return self._files(branch, "move", {"from": src, "to": dst, "overwrite": overwrite or None})


class Branch:
    """A branch of a Workspace; a context manager that forks on entry and
    commits (or, on an exception, aborts) on exit."""

    def __init__(self, ws, name, parent="main"):
        self.ws = ws
        self.name = name
        self.parent = parent
        self.info = None

    def __enter__(self):
        self.info = self.ws.fork(self.parent, self.name)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            state = self.ws.get(self.name).get("state")
        except NotFound:
            return False  # committed or aborted inside the block
        if state != "live":
            return False
        # The block is over: the attempts it ran have ended, so the mount
        # that served them is no user to protect (force).
        if exc_type is None:
            self.ws.commit(self.name, force=True)
        else:
            self.ws.abort(self.name, force=True)
        return False

    @property
    def path(self):
        """The branch's directory in the server's mount of /, or None."""
        m = self.ws.mount
        return os.path.join(m, self.name) if m else None

    def run(self, argv, timeout=None, grace=None):
        """Run argv in this branch (its working directory is path),
        supervised by the server; returns the record. The branch stays
        live: the context manager decides."""
        return self.ws.run(self.name, argv, timeout=timeout, on_exit="keep", grace=grace)

    def commit(self, force=False):
        return self.ws.commit(self.name, force=force)

    def abort(self, force=False):
        return self.ws.abort(self.name, force=force)

    def diff(self):
        return self.ws.diff(self.name)

    def checkpoint(self, label):
        return self.ws.checkpoint(self.name, label)

    def restore(self, label):
        return self.ws.restore(self.name, label)

    # Files, without a mount (see Workspace.read_file and the others).

    def read(self, path):
        """The content of a file: str when it is UTF-8 text, else bytes."""
        b = self.ws.read_bytes(self.name, path)
        try:
            return b.decode()
        except UnicodeDecodeError:
            return b

    def write(self, path, content, mode=None):
        return self.ws.write_file(self.name, path, content, mode=mode)

    def edit(self, path, old, new, replace_all=False):
        return self.ws.edit_file(self.name, path, old, new, replace_all=replace_all)

    def ls(self, path="", glob=None, recursive=False, limit=None):
        return self.ws.list_files(self.name, path, glob=glob, recursive=recursive, limit=limit)

    def search(self, pattern, path="", glob=None, limit=None):
        return self.ws.search_files(self.name, pattern, path, glob=glob, limit=limit)

    def delete(self, path, recursive=False):
        return self.ws.delete_file(self.name, path, recursive=recursive)

    def move(self, src, dst, overwrite=False):
        return self.ws.move_file(self.name, src, dst, overwrite=overwrite)
