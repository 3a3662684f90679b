# Branch lifecycle through the Linux kernel NFSv3 client, mixing host CLI
# calls (host ACTION ...) with guest file operations. env.sh sets NFS_PORT.
#
# Every mount uses actimeo=0: a commit or abort on the host changes the
# exports the way another NFS client would, and without it the guest may
# answer lookups from its attribute cache for up to a minute.

mount_main() {
	nfsmount /main /mnt/main actimeo=0 || fail "mount /main"
	echo base > /mnt/main/base.txt || fail "write base.txt"
}

fork_and_mount() {
	for b in f1 f2 ab; do
		host fork main $b || fail "fork main $b"
		nfsmount /$b /mnt/$b actimeo=0 || fail "mount /$b"
	done
	for b in f1 f2 ab; do
		expect_eq "$(cat /mnt/$b/base.txt)" base "base.txt in $b"
	done
}

# Two branches must never look like one device: the kernel shares a
# superblock between mounts of the same fsid.
distinct_devices() {
	devs=$(for b in main f1 f2 ab; do stat -c %d /mnt/$b; done | sort -u | wc -l)
	expect_eq "$devs" 4 "distinct st_dev among main f1 f2 ab ($(for b in main f1 f2 ab; do stat -c %d /mnt/$b; done | tr '\n' ' '))"
}

write_in_fork() {
	echo from-f1 > /mnt/f1/hello.txt || fail "write hello.txt in f1"
	mkdir /mnt/f1/dir && echo y > /mnt/f1/dir/y || fail "mkdir in f1"
	echo changed > /mnt/f1/base.txt || fail "overwrite base.txt in f1"
	sync
	expect_eq "$(cat /mnt/f1/hello.txt)" from-f1 "hello.txt in f1"
}

fork_isolation() {
	for b in main f2 ab; do
		[ ! -e /mnt/$b/hello.txt ] || fail "hello.txt leaked into $b"
		expect_eq "$(cat /mnt/$b/base.txt)" base "base.txt in $b"
	done
}

# The guest keeps ab and f1 mounted: the server refuses to commit or abort a
# branch in use unless forced.
abort_mounted() {
	if host abort ab; then fail "abort of the mounted branch ab was not refused"; fi
	host abort ab --force || fail "abort ab"
	expect_err "Stale file handle" ls /mnt/ab
	expect_err "Stale file handle" cat /mnt/ab/base.txt
	expect_err "Stale file handle" touch /mnt/ab/new
	expect_eq "$(ls /mnt/all | tr '\n' ' ')" "f1 f2 main " "branches under / after abort"
}

commit_fork() {
	host commit f1 --force || fail "commit f1"
	expect_eq "$(cat /mnt/main/hello.txt)" from-f1 "hello.txt in main"
	expect_eq "$(cat /mnt/main/dir/y)" y "dir/y in main"
	expect_eq "$(cat /mnt/main/base.txt)" changed "base.txt in main"
}

sibling_stale() {
	expect_err "Stale file handle" ls /mnt/f2
	expect_err "Stale file handle" cat /mnt/f2/base.txt
	expect_err "Stale file handle" touch /mnt/f2/new
}

restart_with_open_files() {
	exec 4>/mnt/main/open.txt || fail "open open.txt"
	exec 5</mnt/main/base.txt || fail "open base.txt"
	echo before >&4
	sync
	host stop || fail "stop server"
	# Buffered while the server is down; flushed once it is back.
	( echo during >&4; sync ) &
	host start || fail "start server"
	wait
	echo after >&4 || fail "write after restart"
	exec 4>&-
	expect_eq "$(cat <&5)" changed "read through fd opened before the restart"
	exec 5<&-
	drop_caches
	expect_eq "$(cat /mnt/main/open.txt)" "before
during
after" "open.txt after restart"
	expect_eq "$(cat /mnt/main/dir/y)" y "existing file after restart"
	echo new > /mnt/main/new.txt || fail "create after restart"
	expect_eq "$(ls /mnt/main | tr '\n' ' ')" "base.txt dir hello.txt new.txt open.txt " "listing after restart"
}

# The server is killed with SIGKILL while the guest holds files open: data the
# guest had flushed (fsync) survives, and the guest carries on after the
# server comes back, with the same handles.
kill9_with_open_files() {
	exec 4>/mnt/main/crash.txt || fail "open crash.txt"
	echo acknowledged >&4
	sync /mnt/main/crash.txt || fail "fsync crash.txt"
	host kill9 || fail "kill -9 server"
	host start || fail "start server"
	echo later >&4 || fail "write after crash"
	exec 4>&-
	drop_caches
	expect_eq "$(cat /mnt/main/crash.txt)" "acknowledged
later" "crash.txt after kill -9"
	expect_eq "$(cat /mnt/main/open.txt)" "before
during
after" "open.txt after kill -9"
}

# The export / shows every live branch as a top-level directory.
root_export() {
	nfsmount / /mnt/all actimeo=0 || fail "mount /"
	expect_eq "$(ls /mnt/all | tr '\n' ' ')" "ab f1 f2 main " "branches under /"
	expect_eq "$(cat /mnt/all/f1/hello.txt)" from-f1 "f1/hello.txt through /"
	expect_eq "$(cat /mnt/all/main/base.txt)" base "main/base.txt through /"
	echo via-root > /mnt/all/f2/via-root.txt || fail "write through /"
	expect_eq "$(cat /mnt/f2/via-root.txt)" via-root "f2/via-root.txt through the f2 mount"
	# Tools that compare st_dev/st_ino (cp -a, tar, du, find) must not take
	# one branch's copy of a file for another's.
	p1=$(stat -c %d:%i /mnt/all/f1/base.txt)
	p2=$(stat -c %d:%i /mnt/all/f2/base.txt)
	p3=$(stat -c %d:%i /mnt/all/main/base.txt)
	echo "st_dev:st_ino of base.txt under /: f1 $p1, f2 $p2, main $p3"
	[ "$p1" != "$p2" ] && [ "$p1" != "$p3" ] && [ "$p2" != "$p3" ] || fail "base.txt of f1, f2 and main share st_dev:st_ino: $p1 $p2 $p3"
}

step mount_main mount_main
step fork_and_mount fork_and_mount
step distinct_devices distinct_devices
step write_in_fork write_in_fork
step fork_isolation fork_isolation
step root_export root_export
step abort_mounted abort_mounted
step commit_fork commit_fork
step sibling_stale sibling_stale
step restart_with_open_files restart_with_open_files
step kill9_with_open_files kill9_with_open_files
