# A regular user's first session through the Linux kernel NFSv3 client:
# the server runs as uid 1000 on a store that user created, and in the
# guest a process as uid 1000 (as_user) works in a mount of main. Only the
# mounts themselves need root in the guest. env.sh sets NFS_PORT.

mount_main() {
	nfsmount /main /mnt/main actimeo=0 || fail "mount /main"
}

# A store created without --from belongs to the user who created it.
root_belongs_to_user() {
	expect_eq "$(stat -c '%u %g %a' /mnt/main)" "1000 1000 755" "owner and mode of main's root"
}

create_and_edit() {
	as_user "echo hello > /mnt/main/a.txt" || fail "create a.txt as uid 1000"
	as_user "echo more >> /mnt/main/a.txt" || fail "append to a.txt"
	as_user "mkdir -p /mnt/main/src/pkg && echo 'package pkg' > /mnt/main/src/pkg/p.go" || fail "mkdir -p and write"
	as_user "ln -s a.txt /mnt/main/link && mv /mnt/main/a.txt /mnt/main/b.txt && mv /mnt/main/b.txt /mnt/main/a.txt" || fail "symlink and renames"
	drop_caches
	expect_eq "$(as_user "cat /mnt/main/a.txt")" "hello
more" "a.txt"
	expect_eq "$(stat -c '%u %g' /mnt/main/a.txt)" "1000 1000" "owner of a.txt"
	expect_eq "$(stat -c '%u %g %a' /mnt/main/src/pkg)" "1000 1000 755" "owner and mode of src/pkg"
	expect_eq "$(readlink /mnt/main/link)" a.txt "symlink target"
}

# Go's module cache and git's objects are read-only; their owner chmods
# and touches them.
chmod_own_readonly() {
	as_user "echo obj > /mnt/main/obj && chmod 0444 /mnt/main/obj" || fail "create a 0444 file"
	expect_err "Permission denied" as_user "echo x > /mnt/main/obj"
	as_user "touch /mnt/main/obj" || fail "touch own 0444 file"
	as_user "touch -d '2001-02-03 04:05:06' /mnt/main/obj" || fail "touch -d own 0444 file"
	expect_eq "$(stat -c %Y /mnt/main/obj)" "$(date -d '2001-02-03 04:05:06' +%s)" "mtime after touch -d"
	as_user "chmod u+w /mnt/main/obj && echo new > /mnt/main/obj" || fail "chmod u+w then write"
	as_user "mkdir /mnt/main/mod && echo m > /mnt/main/mod/go.mod && chmod 0555 /mnt/main/mod" || fail "a 0555 directory"
	expect_err "Permission denied" as_user "rm /mnt/main/mod/go.mod"
	as_user "chmod u+w /mnt/main/mod && rm /mnt/main/mod/go.mod && rmdir /mnt/main/mod" || fail "chmod u+w dir then remove"
	drop_caches
	expect_eq "$(stat -c %a /mnt/main/obj)" 644 "mode after chmod u+w"
	expect_eq "$(cat /mnt/main/obj)" new "obj"
}

# Root in the guest is still root on the server, and others are others.
others() {
	echo by-root > /mnt/main/rootfile || fail "root writes in the user's directory"
	expect_eq "$(stat -c %u /mnt/main/rootfile)" 0 "owner of root's file"
	expect_err "Permission denied" as_user "echo x >> /mnt/main/rootfile"
	expect_err "Permission denied" /bin/mounthelper runas 1001 1001 /bin/sh -c "echo x > /mnt/main/intruder"
	expect_err "Operation not permitted" as_user "chown 0 /mnt/main/a.txt"
	rm /mnt/main/rootfile || fail "rm rootfile"
}

# The user's branch work: fork, write, commit into main, fork, abort. The
# guest's umount(2) sends no UMNT (umount.nfs would), so the server still
# counts the branch as mounted: commit and abort are forced.
fork_commit_abort() {
	host fork main try1 || fail "fork main try1"
	nfsmount /try1 /mnt/try1 actimeo=0 || fail "mount /try1"
	as_user "echo 'an idea' > /mnt/try1/idea.txt" || fail "write idea.txt in try1"
	as_user "rm /mnt/try1/link" || fail "rm link in try1"
	sync
	host diff try1 || fail "diff try1"
	umount /mnt/try1 || fail "umount /mnt/try1"
	host commit try1 --force || fail "commit try1"
	expect_eq "$(as_user "cat /mnt/main/idea.txt")" "an idea" "idea.txt in main"
	[ ! -e /mnt/main/link ] || fail "link still in main after the commit"
	expect_eq "$(stat -c '%u %g' /mnt/main/idea.txt)" "1000 1000" "owner of idea.txt in main"
	host fork main try2 || fail "fork main try2"
	nfsmount /try2 /mnt/try2 actimeo=0 || fail "mount /try2"
	as_user "rm -rf /mnt/try2/*" || fail "rm -rf in try2 as uid 1000"
	umount /mnt/try2 || fail "umount /mnt/try2"
	host abort try2 --force || fail "abort try2"
	host list || fail "list"
	expect_eq "$(as_user "cat /mnt/main/idea.txt")" "an idea" "main after the abort of try2"
}

cleanup_as_user() {
	as_user "rm -rf /mnt/main/*" || fail "rm -rf as uid 1000"
	expect_eq "$(ls -A /mnt/main | wc -l)" 0 "entries left in main"
}

step mount_main mount_main
step root_belongs_to_user root_belongs_to_user
step create_and_edit create_and_edit
step chmod_own_readonly chmod_own_readonly
step others others
step fork_commit_abort fork_commit_abort
step cleanup_as_user cleanup_as_user
