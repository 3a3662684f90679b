"""Tests of the branchnfs client against a real server.

They need a running `branchnfs serve` whose store is $BRANCHNFS_STORE, and
that runs jobs (serve --mount, or the test-only --workdir-root). The Go test
tests/e2e/python_test.go starts one and runs them as a regular user.
"""

import os
import unittest
import uuid

import branchnfs


def sh(script):
    return ["/bin/sh", "-c", script]


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ws = branchnfs.Workspace.connect()

    def name(self):
        return "py-" + uuid.uuid4().hex[:8]

    def test_status_and_list(self):
        st = self.ws.status()
        self.assertIn("version", st)
        names = [b["name"] for b in self.ws.list()]
        self.assertIn("main", names)

    def test_fork_diff_commit(self):
        n = self.name()
        info = self.ws.fork("main", n)
        self.assertEqual(info["name"], n)
        self.assertEqual(info["export"], "/" + n)
        self.assertEqual(self.ws.diff(n)["changes"], [])
        res = self.ws.commit(n)
        self.assertEqual(res["parent"], "main")
        with self.assertRaises(branchnfs.NotFound):
            self.ws.get(n)

    def test_patch(self):
        n = self.name()
        self.ws.fork("main", n)
        self.assertEqual(self.ws.patch(n), b"")
        self.ws.abort(n)
        with self.assertRaises(branchnfs.NotFound):
            self.ws.patch(n)

    def test_token(self):
        with open(os.path.join(self.ws.store, "control.token")) as f:
            tok = f.read().strip()
        self.assertEqual(len(tok), 64)
        self.assertEqual(os.stat(os.path.join(self.ws.store, "control.token")).st_mode & 0o777, 0o600)
        with self.assertRaises(branchnfs.Unauthorized) as cm:
            branchnfs.Workspace(self.ws.store, token="0" * 64).fork("main", self.name())
        self.assertEqual(cm.exception.status, 401)
        self.assertIn("control.token", cm.exception.message)
        self.assertEqual(branchnfs.Workspace(self.ws.store, token=tok).status()["version"], self.ws.status()["version"])

    def test_errors_carry_codes(self):
        n = self.name()
        self.ws.fork("main", n)
        with self.assertRaises(branchnfs.Exists) as cm:
            self.ws.fork("main", n)
        self.assertEqual(cm.exception.code, "exists")
        self.assertEqual(cm.exception.status, 409)
        with self.assertRaises(branchnfs.InvalidName):
            self.ws.fork("main", "no/slash")
        with self.assertRaises(branchnfs.NotFound):
            self.ws.commit("nosuch-" + n)
        with self.assertRaises(branchnfs.ReadOnly):
            self.ws.commit("main")
        self.ws.abort(n)

    def test_sibling_invalidated(self):
        p = self.name()
        self.ws.fork("main", p)
        a, b = p + "-a", p + "-b"
        self.ws.fork(p, a)
        self.ws.fork(p, b)
        with self.assertRaises(branchnfs.HasChildren) as cm:
            self.ws.commit(p)
        self.assertEqual(sorted(cm.exception.children), [a, b])
        self.assertEqual(self.ws.commit(a)["invalidated"], [b])
        with self.assertRaises(branchnfs.Invalidated) as cm:
            self.ws.commit(b)
        self.assertIn("commit of " + a, cm.exception.invalidated_by)
        self.ws.abort(b)
        self.ws.abort(p)

    def test_branch_context_commits_on_success(self):
        n = self.name()
        with self.ws.branch(n) as b:
            self.assertEqual(self.ws.get(n)["state"], "live")
            rec = b.run(sh("exit 0"))
            self.assertEqual(rec["exit_code"], 0)
        with self.assertRaises(branchnfs.NotFound):
            self.ws.get(n)
        committed = [x for x in self.ws.list() if x["name"] == n]
        self.assertEqual([x["state"] for x in committed], ["committed"])

    def test_branch_context_aborts_on_exception(self):
        n = self.name()
        with self.assertRaises(ZeroDivisionError):
            with self.ws.branch(n):
                1 / 0
        states = [x["state"] for x in self.ws.list() if x["name"] == n]
        self.assertEqual(states, ["aborted"])

    def test_run_exit_status_and_timeout(self):
        n = self.name()
        self.ws.fork("main", n)
        rec = self.ws.run(n, sh('test "$BRANCHNFS_BRANCH" = %s && exit 3' % n))
        self.assertEqual((rec["exit_code"], rec["state"]), (3, "live"))
        rec = self.ws.run(n, ["sleep", "1000"], timeout=0.2, grace=0.05)
        self.assertEqual(rec["killed_by"], "timeout")
        self.assertEqual(rec["signal"], 15)
        self.assertEqual(rec["state"], "aborted")

    def test_checkpoint_restore(self):
        n = self.name()
        self.ws.fork("main", n)
        cp = self.ws.checkpoint(n, "cp1")
        self.assertEqual(cp["label"], "cp1")
        self.assertEqual(self.ws.restore(n, "cp1"), {"branch": n, "label": "cp1"})
        with self.assertRaises(branchnfs.NotFound):
            self.ws.restore(n, "nosuch")
        self.ws.abort(n)

    def test_race(self):
        p = self.name()
        self.ws.fork("main", p)
        recs = self.ws.race(p, cmds=[sh("exit 1"), sh("true"), ["sleep", "1000"]], grace=0.1)
        self.assertEqual([r["state"] for r in recs], ["aborted", "committed", "aborted"])
        self.assertEqual(recs[2]["killed_by"], "sibling")
        self.ws.abort(p)

    def test_best_of(self):
        p = self.name()
        self.ws.fork("main", p)
        recs = self.ws.best_of(p, 3, sh('echo "${BRANCHNFS_BRANCH##*-}" >&3'))
        self.assertEqual([r["score"] for r in recs], [0, 1, 2])
        self.assertEqual([r["state"] for r in recs], ["aborted", "aborted", "committed"])
        self.ws.abort(p)

    def test_events(self):
        p = self.name()
        self.ws.fork("main", p)
        job = self.ws.start_job("race", parent=p, cmds=[sh("true"), sh("true")])
        kinds = [ev["kind"] for ev in self.ws.events(job["id"])]
        self.assertEqual(kinds.count("started"), 2)
        self.assertEqual(kinds[-1], "done")
        self.assertEqual(self.ws.job(job["id"])["state"], "done")
        self.ws.abort(p)

    def test_meta_and_force(self):
        n = self.name()
        self.ws.fork("main", n)
        md = self.ws.set_meta(n, labels={"task": "t1"}, score=0.5, lease=600)
        self.assertEqual(md["labels"], {"task": "t1"})
        self.assertEqual(md["score"], 0.5)
        self.assertIn("lease_expires", md)
        self.assertEqual(self.ws.metas()[n]["score"], 0.5)
        self.assertEqual(self.ws.commit(n, force=True)["branch"], n)

    def test_no_server(self):
        with self.assertRaises(branchnfs.NoServer):
            branchnfs.Workspace.connect(store="/nonexistent-branchnfs-store")

    def test_space_unique_gc(self):
        n = self.name()
        self.ws.fork("main", n)
        sp = self.ws.space()
        self.assertGreater(sp["disk_bytes"], 0)
        self.assertGreaterEqual(sp["branches"]["live"], 2)
        self.assertIn("total_bytes", sp["reclaimable"])
        self.assertIn(n, sp["unique_bytes"])
        u = self.ws.unique()
        self.assertIn("main", u)
        self.assertEqual(u[n], 0)
        self.ws.abort(n)
        self.assertNotIn(n, self.ws.unique())
        res = self.ws.gc()
        self.assertEqual(sorted(res["rechunk"]), ["blocks", "bytes", "chunks", "extents"])
        self.assertGreaterEqual(res["rechunk"]["blocks"], 0)
        self.assertGreaterEqual(res["reclaim"]["layers"], 0)
        self.assertGreater(res["disk_before"], 0)
        self.assertGreater(res["disk_after"], 0)


if __name__ == "__main__":
    unittest.main()


class FilesTest(unittest.TestCase):
    """A branch's files without a mount."""

    @classmethod
    def setUpClass(cls):
        cls.ws = branchnfs.Workspace.connect()

    def test_files(self):
        n = "py-" + uuid.uuid4().hex[:8]
        with self.ws.branch(n) as b:
            r = b.write("src/app.py", "def main():\n    return 1\n")
            self.assertTrue(r["created"])
            self.assertEqual(b.read("src/app.py"), "def main():\n    return 1\n")
            part = self.ws.read_file(n, "src/app.py", offset=4, limit=4)
            self.assertEqual((part["content"], part["eof"], part["size"]), ("main", False, 25))
            b.write("data.bin", b"\x00\xff\x01")
            self.assertEqual(b.read("data.bin"), b"\x00\xff\x01")
            self.assertEqual(b.edit("src/app.py", "return 1", "return 2")["replacements"], 1)
            with self.assertRaises(branchnfs.NoMatch):
                b.edit("src/app.py", "return 1", "return 3")
            b.write("twice.txt", "x x")
            with self.assertRaises(branchnfs.NotUnique):
                b.edit("twice.txt", "x", "y")
            self.assertEqual(b.edit("twice.txt", "x", "y", replace_all=True)["replacements"], 2)
            self.assertEqual([e["path"] for e in b.ls(glob="*.py")], ["src/app.py"])
            m = b.search(r"return \d")
            self.assertEqual([(x["path"], x["line"]) for x in m["matches"]], [("src/app.py", 2)])
            b.move("src/app.py", "lib/app.py")
            with self.assertRaises(branchnfs.NotFound):
                b.read("src/app.py")
            b.delete("src", recursive=True)
            for bad in ("../x", "/etc/passwd", "a/../../x"):
                with self.assertRaises(branchnfs.OutsideBranch):
                    b.read(bad)
                with self.assertRaises(branchnfs.OutsideBranch):
                    b.write(bad, "x")
            kinds = {c["path"]: c["kind"] for c in b.diff()["changes"]}
            self.assertEqual(kinds.get("lib/app.py"), "added")
            self.assertEqual(kinds.get("data.bin"), "added")
        self.assertIn("return 2", self.ws.read_bytes("main", "lib/app.py").decode())
