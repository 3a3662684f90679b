# Attempts through the Linux kernel NFSv3 client: branchnfs runs in the
# guest, in a mount of the export /, and reaches the server's API through a
# TCP forward of its control socket ($BRANCHNFS_CONTROL and the API token
# $BRANCHNFS_CONTROL_TOKEN, from env.sh). The trees double-fork (setsid) and
# keep writing.

export BRANCHNFS_CONTROL BRANCHNFS_CONTROL_TOKEN BRANCHNFS_STORE=/tmp/store
# bnfs runs branchnfs with a bound, so that a hang fails its step (and
# shows the processes) instead of silencing the guest.
bnfs() {
	_sub=$1; shift
	timeout 120 /bin/branchnfs "$_sub" --mount /mnt/all --grace 300ms "$@"
	_rc=$?
	if [ $_rc -eq 143 ] && [ "$_sub" != exec ]; then ps > /dev/console; cat /tmp/store/attempts/*.log > /dev/console; fi
	return $_rc
}
gone() { ! kill -0 "$(cat "$1")" 2>/dev/null; }

mount_root() {
	nfsmount / /mnt/all actimeo=0 || fail "mount /"
}

# doctor in the guest: it reaches the server through $BRANCHNFS_CONTROL,
# forks its scratch branch there, and runs every filesystem check in it
# through the kernel mount of / (--mounted): each must be ok.
doctor_through_kernel_client() {
	timeout 120 /bin/branchnfs doctor --json --mounted /mnt/all > /tmp/doctor.json
	rc=$?
	bad=$(awk -F'"' '$2 == "name" { n = $4 } $2 == "status" { s[n] = $4 } $2 == "detail" { d[n] = $4 }
		END { k = split("server mount fs-write fs-read fs-fsync fs-rename fs-lock fs-chmod fs-unicode fs-large-file fs-symlink cleanup", w, " ")
			for (i = 1; i <= k; i++) if (s[w[i]] != "ok") printf "%s=%s (%s); ", w[i], s[w[i]], d[w[i]]
			for (n in s) if (s[n] == "fail") printf "%s=fail (%s); ", n, d[n]
			printf "checked" }' /tmp/doctor.json)
	[ "$bad" = checked ] || { cat /tmp/doctor.json > /dev/console; fail "doctor through the kernel client (exit $rc): $bad"; }
	expect_eq "$rc" 0 "doctor exit status"
	[ -z "$(ls /mnt/all | grep '^doctor-')" ] || fail "doctor's scratch branch is left: $(ls /mnt/all)"
}

# Every byte the tree wrote, the leader's and a child's that finishes after
# the leader exits, is in the parent after the commit, including pages
# written through mmap after the file was closed, which nothing but
# writeback or a sync sends: exec flushes the mount (syncfs) before it
# commits.
exec_commits_every_byte() {
	host fork main e1 || fail "fork e1"
	bnfs exec e1 --on-exit commit --grace 30s -- sh -c 'dd if=/dev/urandom of=big bs=64k count=64 2>/dev/null; md5sum < big > /tmp/want; /bin/mounthelper mmapwrite mapped 1048576 > /tmp/want-mapped; (sleep 0.2; echo late > late.txt) &' || fail "exec exit $?"
	drop_caches
	expect_eq "$(md5sum < /mnt/all/main/big)" "$(cat /tmp/want)" "md5 of main/big"
	expect_eq "$(md5sum < /mnt/all/main/mapped | cut -d' ' -f1)" "$(cat /tmp/want-mapped)" "md5 of main/mapped (written through mmap)"
	expect_eq "$(cat /mnt/all/main/late.txt)" late "main/late.txt from the leader's child"
}

# A timeout during a write storm: the branch is fenced, the tree (with a
# setsid grandchild that ignores SIGTERM) is killed, exec returns the
# leader's status.
exec_timeout_write_storm() {
	host fork main e2 || fail "fork e2"
	bnfs exec e2 --timeout 2s -- sh -c '(setsid sh -c "trap \"\" TERM; echo \$\$ > /tmp/e2.pid; while :; do dd if=/dev/zero of=f\$\$ bs=64k count=4 2>/dev/null; done" &); while :; do echo x >> storm; done'
	rc=$?
	expect_eq "$rc" 143 "exit status (SIGTERM)"
	gone /tmp/e2.pid || fail "grandchild $(cat /tmp/e2.pid) still runs"
	[ ! -e /mnt/all/e2 ] || fail "e2 still under /"
}

# The first attempt to succeed commits; the loser, whose setsid grandchild
# ignores SIGTERM and keeps appending, is killed and leaves nothing.
race_kills_loser() {
	out=$(bnfs race main --json -c 'sleep 1; echo win > w.txt' -c '(setsid sh -c "trap \"\" TERM; echo \$\$ > /tmp/loser.pid; while :; do echo l >> l.txt; done" &); sleep 1000') || { echo "$out" > /dev/console; fail "race exit $?: $out"; }
	expect_eq "$(cat /mnt/all/main/w.txt)" win "main/w.txt"
	gone /tmp/loser.pid || fail "loser grandchild $(cat /tmp/loser.pid) still runs"
	[ ! -e /mnt/all/main/l.txt ] || fail "the loser's file reached main"
	case "$out" in *'"killed_by": "sibling"'*) ;; *) fail "no loser killed by its sibling: $out";; esac
}

# Ctrl-C (SIGINT) of exec: the branch is fenced and the tree killed.
exec_interrupted() {
	host fork main e3 || fail "fork e3"
	# Not through bnfs: $! must be branchnfs itself, not a subshell.
	/bin/branchnfs exec e3 --mount /mnt/all --grace 300ms -- sh -c 'echo $$ > /tmp/e3.pid; (setsid sh -c "echo \$\$ > /tmp/e3gc.pid; exec sleep 1000" &); while :; do echo y >> y.txt; done' &
	ex=$!
	while [ ! -s /tmp/e3gc.pid ]; do sleep 0.1; done
	kill -INT $ex
	wait $ex
	rc=$?
	expect_eq "$rc" 143 "exit status after SIGINT (the leader's SIGTERM)"
	gone /tmp/e3.pid || fail "leader still runs"
	gone /tmp/e3gc.pid || fail "grandchild still runs"
	[ ! -e /mnt/all/e3 ] || fail "e3 still under /"
}

# The supervising exec dies (SIGKILL): its helper ends the tree, and the
# lease exec kept on the branch, no longer renewed, expires: the server
# aborts the branch.
exec_killed_lease_expires() {
	host fork main e4 || fail "fork e4"
	/bin/branchnfs exec e4 --mount /mnt/all --grace 300ms --lease 3s -- sh -c '(setsid sh -c "echo \$\$ > /tmp/e4.pid; while :; do echo z >> z.txt; sleep 0.05; done" &); sleep 1000' &
	ex=$!
	while [ ! -s /tmp/e4.pid ]; do sleep 0.1; done
	kill -KILL $ex
	wait $ex
	i=0
	while ! gone /tmp/e4.pid; do i=$((i+1)); [ $i -lt 100 ] || fail "grandchild still runs 10s after its supervisor died"; sleep 0.1; done
	i=0
	while [ -e /mnt/all/e4 ]; do i=$((i+1)); [ $i -lt 300 ] || fail "e4 still under / 30s after its supervisor died"; sleep 0.1; done
	echo "e4 aborted after about $((i/10))s"
}

# best-of runs every attempt to its end and commits the best score (what
# each wrote to fd 3); the others are aborted.
best_of_commits_best() {
	out=$(bnfs best-of main -n 3 --json -- sh -c 'i=${BRANCHNFS_BRANCH##*-}; echo $i > best.txt; echo $i >&3') || fail "best-of exit $?: $out"
	expect_eq "$(cat /mnt/all/main/best.txt)" 2 "main/best.txt (the best score)"
	case "$out" in *'"state": "committed"'*) ;; *) fail "nothing committed: $out";; esac
}

# A write storm whose branch is aborted from the host: exec sees the branch
# gone and kills the tree, whose setsid grandchild ignores SIGTERM.
abort_during_write_storm() {
	host fork main e5 || fail "fork e5"
	/bin/branchnfs exec e5 --mount /mnt/all --grace 300ms --json -- sh -c '(setsid sh -c "trap \"\" TERM; echo \$\$ > /tmp/e5.pid; while :; do echo s >> s.txt; done" &); while :; do dd if=/dev/zero of=d bs=64k count=8 2>/dev/null; done' > /tmp/e5.json &
	ex=$!
	while [ ! -s /tmp/e5.pid ]; do sleep 0.1; done
	host abort e5 || fail "abort e5"
	wait $ex
	grep -q '"killed_by":"branch_gone"' /tmp/e5.json || fail "exec record: $(cat /tmp/e5.json)"
	gone /tmp/e5.pid || fail "grandchild still runs"
}

step mount_root mount_root
step doctor_through_kernel_client doctor_through_kernel_client
step exec_commits_every_byte exec_commits_every_byte
step exec_timeout_write_storm exec_timeout_write_storm
step race_kills_loser race_kills_loser
step exec_interrupted exec_interrupted
step exec_killed_lease_expires exec_killed_lease_expires
step best_of_commits_best best_of_commits_best
step abort_during_write_storm abort_during_write_storm
