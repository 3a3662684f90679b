# Debian's git through the Linux kernel NFSv3 client, as a regular user:
# the server runs as uid 1000 on a store that user created, and in the
# guest git runs as uid 1000 (as_user) in a mount of a fork of main: a
# repository of 1,000 generated files, commits, a local clone (which hard
# links the objects), branches, gc and fsck. The fork is then committed
# into main and the host checks the repository with its own git. env.sh
# sets NFS_PORT and MOUNT_OPTS (the options of `branchnfs mount --print`).

export HOME=/tmp/alice GIT_CONFIG_NOSYSTEM=1 LC_ALL=C
export GIT_AUTHOR_NAME=alice GIT_AUTHOR_EMAIL=alice@example.com
export GIT_COMMITTER_NAME=alice GIT_COMMITTER_EMAIL=alice@example.com
R=/mnt/work/repo
C=/mnt/work/clone
# Tracked files: 20 directories of 50 generated files, plus a script, a
# symlink and a binary file.
NFILES=1003

# gen.sh DIR: the generated tree, written by uid 1000.
mkdir -p "$HOME"
chown 1000:1000 "$HOME"
cat > /tmp/gen.sh <<'EOF'
set -e
cd "$1"
i=0
while [ $i -lt 20 ]; do
	mkdir d$i
	j=0
	while [ $j -lt 50 ]; do
		echo "file $i/$j" > d$i/f$j.txt
		j=$((j+1))
	done
	i=$((i+1))
done
printf '#!/bin/sh\necho built\n' > build.sh
chmod 755 build.sh
ln -s d0/f0.txt first
dd if=/dev/urandom of=blob.bin bs=1024 count=64 2>/dev/null
EOF
# change.sh: edits, new files, deletions and a mode change in a clone.
cat > /tmp/change.sh <<'EOF'
set -e
cd "$1"
j=0
while [ $j -lt 10 ]; do echo "edited $j" >> d0/f$j.txt; j=$((j+1)); done
mkdir new
j=0
while [ $j -lt 5 ]; do echo "new $j" > new/n$j.txt; j=$((j+1)); done
rm d1/f0.txt d1/f1.txt d1/f2.txt
chmod 755 d2/f0.txt
EOF
chmod 755 /tmp/gen.sh /tmp/change.sh

# g DIR ARGS...: git ARGS as uid 1000 in DIR (ARGS without spaces).
g() {
	_d=$1; shift
	as_user "cd $_d && git $*"
}
# clean DIR: git status in DIR reports nothing.
clean() {
	_st=$(g "$1" status --porcelain) || fail "git status in $1"
	[ -z "$_st" ] || fail "git status in $1 not clean: $(echo "$_st" | head -n 5)"
}
tracked() { g "$1" ls-files | wc -l; }

git_runs() {
	as_user "git config --global init.defaultBranch main && git config --global gc.autoDetach false" || fail "git config --global"
	_v=$(as_user "git --version") || fail "git --version: $_v"
	case "$_v" in "git version 2."*) echo "$_v";; *) fail "git --version: $_v";; esac
}

fork_and_mount() {
	host fork main work || fail "fork main work"
	nfsmount /work /mnt/work || fail "mount /work"
	expect_eq "$(stat -c %u /mnt/work)" 1000 "owner of the fork's root"
}

init_repo() {
	as_user "mkdir $R && cd $R && git init -q" || fail "git init"
	as_user "sh /tmp/gen.sh $R" || fail "generate the tree"
	expect_eq "$(find $R ! -path '*/.git/*' ! -type d | wc -l)" $NFILES "files generated"
}

commit_initial() {
	g $R add -A || fail "git add -A"
	g $R commit -q -m initial || fail "git commit"
	clean $R
	expect_eq "$(tracked $R)" $NFILES "tracked files"
	expect_eq "$(g $R rev-list --count HEAD)" 1 "commits"
}

# A local clone hard links the objects (or copies them if link(2) fails).
clone_local() {
	as_user "git clone -q $R $C" || fail "git clone"
	clean $C
	expect_eq "$(tracked $C)" $NFILES "tracked files in the clone"
	expect_eq "$(g $C rev-parse HEAD)" "$(g $R rev-parse HEAD)" "HEAD of the clone"
	cmp $R/blob.bin $C/blob.bin || fail "blob.bin differs in the clone"
	expect_eq "$(readlink $C/first)" d0/f0.txt "symlink in the clone"
	expect_eq "$(stat -c %a $C/build.sh)" 755 "mode of build.sh in the clone"
	_obj=$(find $C/.git/objects -type f ! -path '*/pack/*' ! -path '*/info/*' | head -n 1)
	[ -n "$_obj" ] || fail "no loose object in the clone"
	expect_eq "$(stat -c %h "$_obj")" 2 "links of the cloned object $_obj"
}

commit_in_clone() {
	as_user "sh /tmp/change.sh $C" || fail "change the clone"
	g $C add -A || fail "git add -A"
	g $C commit -q -m change || fail "git commit"
	clean $C
	expect_eq "$(g $C diff --name-only HEAD~1 | wc -l)" 19 "files the commit changes"
	expect_eq "$(tracked $C)" $((NFILES + 2)) "tracked files after the commit"
	expect_eq "$(g $C rev-list --count HEAD)" 2 "commits in the clone"
}

checkout_branches() {
	g $C checkout -q -b feature || fail "checkout -b feature"
	as_user "echo feature > $C/d3/f0.txt" || fail "edit d3/f0.txt"
	g $C rm -q -r d4 || fail "git rm -r d4"
	g $C commit -q -a -m feature || fail "commit on feature"
	[ ! -e $C/d4 ] || fail "d4 still there on feature"
	g $C checkout -q main || fail "checkout main"
	clean $C
	expect_eq "$(ls $C/d4 | wc -l)" 50 "files of d4 back on main"
	expect_eq "$(cat $C/d3/f0.txt)" "file 3/0" "d3/f0.txt on main"
	g $C checkout -q feature || fail "checkout feature again"
	[ ! -e $C/d4 ] || fail "d4 back after checking out feature again"
	expect_eq "$(cat $C/d3/f0.txt)" feature "d3/f0.txt on feature"
	g $C checkout -q main || fail "checkout main again"
	clean $C
	drop_caches
	clean $C
}

# The origin fetches the clone's commits: objects move as a pack.
fetch_back() {
	g $R fetch -q $C main:fromclone feature:feature || fail "git fetch from the clone"
	g $R merge -q --ff-only fromclone || fail "git merge --ff-only"
	clean $R
	expect_eq "$(g $R rev-parse HEAD)" "$(g $C rev-parse main)" "HEAD of the origin"
	expect_eq "$(g $R rev-parse feature)" "$(g $C rev-parse feature)" "feature in the origin"
	expect_eq "$(tracked $R)" $((NFILES + 2)) "tracked files in the origin"
	g $R rev-parse HEAD > /tmp/head || fail "rev-parse HEAD"
}

gc_both() {
	for d in $R $C; do
		g $d gc -q --prune=now || fail "git gc in $d"
		expect_eq "$(g $d count-objects -v | grep '^count:')" "count: 0" "loose objects in $d after gc"
		expect_eq "$(ls $d/.git/objects/pack/*.pack | wc -l)" 1 "packs in $d after gc"
		clean $d
	done
}

fsck_both() {
	drop_caches
	for d in $R $C; do
		g $d fsck --full --strict --no-progress || fail "git fsck in $d"
		clean $d
	done
	expect_eq "$(g $R rev-list --count feature)" 3 "commits on feature"
}

# The guest's umount(2) sends no UMNT, so the server still counts the
# branch as mounted: the commit is forced.
commit_work() {
	sync
	umount /mnt/work || fail "umount /mnt/work"
	host commit work --force || fail "commit work"
	nfsmount /main /mnt/main || fail "mount /main"
	expect_eq "$(g /mnt/main/repo rev-parse HEAD)" "$(cat /tmp/head)" "HEAD in main"
	clean /mnt/main/repo
}

host_checks_main() {
	host checkrepo main repo "$(cat /tmp/head)" $((NFILES + 2)) || fail "the host's git on the export of main"
}

step git_runs git_runs
step fork_and_mount fork_and_mount
step init_repo init_repo
step commit_initial commit_initial
step clone_local clone_local
step commit_in_clone commit_in_clone
step checkout_branches checkout_branches
step fetch_back fetch_back
step gc_both gc_both
step fsck_both fsck_both
step commit_work commit_work
step host_checks_main host_checks_main
