# POSIX behaviour through the Linux kernel NFSv3 client.
# Runs as /scenario.sh in the guest after lib.sh; env.sh sets NFS_PORT and
# EXPORT. Every "step NAME FUNC" line is one subtest of TestKernelPOSIX;
# the steps inside posix_steps also run on tmpfs first, as an oracle.

M=/mnt/main

do_mount() {
	nfsmount "$EXPORT" $M || fail "mount $EXPORT"
	rm -rf $W && mkdir $W || fail "mkdir $W"
	echo "mounted $EXPORT"
}

t_create_write_append_read() {
	cd $W || fail cd
	echo hello > f || fail "create"
	echo world >> f || fail "append"
	expect_eq "$(cat f)" "hello
world" "content after append"
	printf 'HE' | dd of=f bs=1 seek=0 conv=notrunc 2>/dev/null || fail "overwrite in place"
	drop_caches
	expect_eq "$(cat f)" "HEllo
world" "content read back after dropping caches"
	expect_eq "$(stat -c %s f)" 12 "size"
}

t_mkdir() {
	cd $W || fail cd
	mkdir -p d1/d2/d3 || fail "mkdir -p"
	[ -d d1/d2/d3 ] || fail "d1/d2/d3 not a directory"
	expect_err "File exists" mkdir d1
	drop_caches
	expect_eq "$(stat -c %F d1/d2)" "directory" "type"
}

t_rename_file_across_dirs() {
	cd $W || fail cd
	mkdir ra rb || fail mkdir
	echo one > ra/f || fail create
	echo old > rb/existing || fail create
	mv ra/f rb/g || fail "mv ra/f rb/g"
	[ ! -e ra/f ] || fail "ra/f still exists"
	expect_eq "$(cat rb/g)" one "moved content"
	mv rb/g rb/existing || fail "mv onto existing"
	drop_caches
	expect_eq "$(cat rb/existing)" one "content after rename over an existing file"
	expect_eq "$(ls ra | wc -l)" 0 "entries left in ra"
	expect_eq "$(ls rb)" existing "entries in rb"
}

t_rename_dir_across_dirs() {
	cd $W || fail cd
	mkdir -p da/sub/deep db || fail mkdir
	echo 1 > da/sub/x && echo 2 > da/sub/deep/y || fail create
	mv da/sub db/moved || fail "mv da/sub db/moved"
	drop_caches
	[ ! -e da/sub ] || fail "da/sub still exists"
	expect_eq "$(cat db/moved/x)" 1 "db/moved/x"
	expect_eq "$(cat db/moved/deep/y)" 2 "db/moved/deep/y"
	expect_eq "$(ls da | wc -l)" 0 "entries left in da"
	echo 3 > db/moved/deep/z || fail "create in moved dir"
}

t_symlink_readlink() {
	cd $W || fail cd
	echo target > tfile || fail create
	ln -s tfile sl || fail "ln -s"
	ln -s /no/such/path dangling || fail "ln -s dangling"
	drop_caches
	expect_eq "$(readlink sl)" tfile "readlink sl"
	expect_eq "$(readlink dangling)" /no/such/path "readlink dangling"
	expect_eq "$(cat sl)" target "read through symlink"
	expect_eq "$(stat -c %F sl)" "symbolic link" "type of sl"
}

t_hardlink_nlink() {
	cd $W || fail cd
	echo data > h1 || fail create
	ln h1 h2 || fail "ln h1 h2"
	drop_caches
	expect_eq "$(stat -c %h h1)" 2 "nlink of h1"
	expect_eq "$(stat -c %h h2)" 2 "nlink of h2"
	expect_eq "$(stat -c %i h1)" "$(stat -c %i h2)" "inode of h1 vs h2"
	expect_eq "$(cat h2)" data "content via h2"
	rm h1 || fail "rm h1"
	drop_caches
	expect_eq "$(stat -c %h h2)" 1 "nlink of h2 after rm h1"
	expect_eq "$(cat h2)" data "content via h2 after rm h1"
}

t_chmod_setuid_sticky() {
	cd $W || fail cd
	echo x > m || fail create
	mkdir sd || fail mkdir
	chmod 4755 m || fail "chmod 4755"
	expect_eq "$(stat -c %a m)" 4755 "mode after chmod 4755"
	chmod 1777 sd || fail "chmod 1777"
	expect_eq "$(stat -c %a sd)" 1777 "mode after chmod 1777"
	drop_caches
	expect_eq "$(stat -c %a m)" 4755 "setuid mode from server"
	expect_eq "$(stat -c %a sd)" 1777 "sticky mode from server"
	chmod 2640 m || fail "chmod 2640"
	drop_caches
	expect_eq "$(stat -c %a m)" 2640 "setgid mode from server"
	expect_eq "$(stat -c %A sd)" "drwxrwxrwt" "ls-style sticky mode"
}

t_utimes_touch_d() {
	cd $W || fail cd
	echo x > tm || fail create
	before=$(date +%s)
	touch -d "2001-02-03 04:05:06" tm || fail "touch -d"
	drop_caches
	expect_eq "$(stat -c %Y tm)" 981173106 "mtime after touch -d"
	expect_eq "$(stat -c %X tm)" 981173106 "atime after touch -d"
	c1=$(stat -c %Z tm)
	[ "$c1" -ge $((before - 5)) ] || fail "ctime $c1 not updated by touch -d (before=$before)"
	touch -m -d "2010-06-07 08:09:10" tm || fail "touch -m -d"
	drop_caches
	expect_eq "$(stat -c %Y tm)" 1275898150 "mtime after touch -m -d"
	expect_eq "$(stat -c %X tm)" 981173106 "atime kept by touch -m"
	sleep 2
	chmod 600 tm || fail chmod
	drop_caches
	c2=$(stat -c %Z tm)
	[ "$c2" -gt "$c1" ] || fail "ctime did not advance on chmod: $c1 -> $c2"
	expect_eq "$(stat -c %Y tm)" 1275898150 "mtime kept by chmod"
}

t_truncate_up_down() {
	cd $W || fail cd
	printf 0123456789 > tr || fail create
	truncate -s 4 tr || fail "truncate -s 4"
	drop_caches
	expect_eq "$(stat -c %s tr)" 4 "size after truncate down"
	expect_eq "$(cat tr)" 0123 "content after truncate down"
	truncate -s 100 tr || fail "truncate -s 100"
	drop_caches
	expect_eq "$(stat -c %s tr)" 100 "size after truncate up"
	expect_eq "$(head -c 4 tr)" 0123 "prefix after truncate up"
	expect_eq "$(tail -c 96 tr | tr -d '\000' | wc -c)" 0 "non-zero bytes in the extension"
}

t_mkfifo() {
	cd $W || fail cd
	mkfifo p || fail mkfifo
	drop_caches
	expect_eq "$(stat -c %F p)" "fifo" "type"
	rm p || fail "rm fifo"
}

t_excl_create_twice() {
	cd $W || fail cd
	( set -C; echo first > ex ) || fail "first O_EXCL create"
	expect_err "exists" sh -c 'set -C; echo second > ex'
	expect_eq "$(cat ex)" first "content after failed O_EXCL create"
}

t_rm_rf_3000() {
	cd $W || fail cd
	mkdir big || fail mkdir
	for d in 0 1 2 3 4 5 6 7 8 9; do
		mkdir big/d$d || fail "mkdir big/d$d"
		i=0
		while [ $i -lt 300 ]; do
			: > big/d$d/file-with-a-longish-name-$i || fail "create big/d$d/$i"
			i=$((i + 1))
		done
	done
	expect_eq "$(find big -type f | wc -l)" 3000 "files created"
	rm -rf big || fail "rm -rf big"
	[ ! -e big ] || fail "big still exists: $(find big | head -5)"
	drop_caches
	expect_eq "$(ls | grep -c '^big$')" 0 "big listed after rm -rf"
}

t_dd_64mib_md5() {
	dd if=/dev/urandom of=/tmp/src bs=1M count=64 2>/dev/null || fail "dd urandom"
	want=$(md5sum < /tmp/src)
	dd if=/tmp/src of=$W/big64 bs=1M conv=fsync 2>/dev/null || fail "dd to nfs"
	rm /tmp/src
	drop_caches
	expect_eq "$(stat -c %s $W/big64)" 67108864 "size"
	expect_eq "$(md5sum < $W/big64)" "$want" "md5 read back"
	rm $W/big64 || fail rm
}

t_nonroot_ownership() {
	cd $W || fail cd
	mkdir own && chmod 1777 own || fail "mkdir own"
	as_user "cd $W/own && echo mine > af && mkdir ad" || fail "create as alice"
	drop_caches
	expect_eq "$(ls -ln own | awk '$NF=="af"{print $3, $4}')" "1000 1000" "ls -ln owner of af"
	expect_eq "$(ls -ln own | awk '$NF=="ad"{print $3, $4}')" "1000 1000" "ls -ln owner of ad"
	expect_eq "$(ls -l own | awk '$NF=="af"{print $3, $4}')" "alice alice" "ls -l owner of af"
	expect_eq "$(as_user "cat $W/own/af")" mine "alice reads her file"
}

t_nonroot_0444_not_writable() {
	cd $W || fail cd
	echo orig > ro && chmod 0444 ro || fail "create ro"
	chmod 0777 $W || fail "chmod $W"
	expect_err "Permission denied" as_user "echo x > $W/ro"
	expect_err "Permission denied" as_user "echo x >> $W/ro"
	as_user "echo mine > $W/own0444 && chmod 0444 $W/own0444" || fail "alice creates own0444"
	expect_err "Permission denied" as_user "echo x > $W/own0444"
	drop_caches
	expect_eq "$(cat ro)" orig "content of ro"
	expect_eq "$(cat own0444)" mine "content of own0444"
}

t_rmdir_nonempty() {
	cd $W || fail cd
	mkdir -p ne/sub && echo x > ne/f || fail create
	expect_err "Directory not empty" rmdir ne
	rm ne/f && rmdir ne/sub || fail "empty ne"
	rmdir ne || fail "rmdir of the emptied directory"
	[ ! -e ne ] || fail "ne still exists"
}

t_unlink_open_file() {
	cd $W || fail cd
	echo keep > uo || fail create
	exec 4<uo || fail "open uo"
	rm uo || fail "rm uo"
	[ ! -e uo ] || fail "uo still visible after rm"
	drop_caches
	expect_eq "$(cat <&4)" keep "read through the fd of the unlinked file"
	exec 4<&-
}

t_nonroot_unlink_denied() {
	cd $W || fail cd
	mkdir locked && echo x > locked/f && chmod 0755 locked || fail "create locked"
	mkdir sticky && chmod 1777 sticky && echo x > sticky/rootfile && chmod 0666 sticky/rootfile || fail "create sticky"
	expect_err "Permission denied" as_user "rm -f $W/locked/f"
	expect_err "Permission denied" as_user "echo y > $W/locked/new"
	as_user "rm -f $W/sticky/rootfile" 2>/dev/null && fail "alice removed root's file from a sticky directory"
	drop_caches
	[ -e locked/f ] || fail "locked/f removed"
	[ ! -e locked/new ] || fail "locked/new created"
	[ -e sticky/rootfile ] || fail "sticky/rootfile removed"
	as_user "echo mine > $W/sticky/alicefile && rm $W/sticky/alicefile" || fail "alice cannot remove her own file in the sticky directory"
}

posix_steps() {
	step create_write_append_read t_create_write_append_read
	step mkdir t_mkdir
	step rename_file_across_dirs t_rename_file_across_dirs
	step rename_dir_across_dirs t_rename_dir_across_dirs
	step symlink_readlink t_symlink_readlink
	step hardlink_nlink t_hardlink_nlink
	step chmod_setuid_sticky t_chmod_setuid_sticky
	step utimes_touch_d t_utimes_touch_d
	step truncate_up_down t_truncate_up_down
	step mkfifo t_mkfifo
	step excl_create_twice t_excl_create_twice
	step rm_rf_3000 t_rm_rf_3000
	step dd_64mib_md5 t_dd_64mib_md5
	step nonroot_ownership t_nonroot_ownership
	step nonroot_0444_not_writable t_nonroot_0444_not_writable
	step rmdir_nonempty t_rmdir_nonempty
	step unlink_open_file t_unlink_open_file
	step nonroot_unlink_denied t_nonroot_unlink_denied
}

# Oracle: the same steps on the guest's own tmpfs, reported as tmpfs/NAME.
# They must all pass, which shows that the scenario asks for real POSIX
# behaviour rather than for quirks of one server.
W=/tmp/posix
mkdir -p $W
STEP_PREFIX=tmpfs/
posix_steps

W=$M/posix
STEP_PREFIX=
step mount do_mount
posix_steps
