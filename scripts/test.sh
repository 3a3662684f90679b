#!/usr/bin/env bash
# The test command (README.md): installs what the tests need, then runs them.
# As root on Debian it installs missing packages with apt-get; elsewhere the
# suites that need them skip with a message (and fail when CI=true). As any
# user it builds versitygw once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v nfs-cp >/dev/null 2>&1 || need+=(libnfs-utils)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
[ -x /usr/bin/python3 ] || need+=(python3) # the Python client's tests run it as a regular user
# The S3 API's tests run the real clients as a regular user.
[ -x /usr/bin/aws ] || need+=(awscli)
[ -x /usr/bin/rclone ] || need+=(rclone)
/usr/bin/python3 -c 'import boto3' >/dev/null 2>&1 || need+=(python3-boto3)
if ((${#need[@]})); then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: installing ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	else
		echo "test.sh: missing ${need[*]} (not root or no apt-get): the suites that need them will skip" >&2
	fi
fi

go mod download

# versitygw, the S3 server the object-storage tests (blobs) start: built
# once per version next to the Go build cache, so later runs on the same
# machine reuse it. Keep the version equal to internal/testbin's
# VersitygwVersion.
versitygw_version=v1.8.0
tools="$(go env GOCACHE)/../branchnfs-tools/versitygw-$versitygw_version"
if [ ! -x "$tools/versitygw" ]; then
	echo "test.sh: building versitygw $versitygw_version into $tools (once per machine, a minute or more)"
	rm -rf "$tools.tmp"
	if GOBIN="$tools.tmp" GOFLAGS= go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version"; then
		mkdir -p "$tools"
		mv "$tools.tmp/versitygw" "$tools/versitygw"
	else
		echo "test.sh: could not build versitygw: the S3 tests of blobs will skip (and fail when CI=true)" >&2
	fi
	rm -rf "$tools.tmp"
fi
export BRANCHNFS_VERSITYGW="$tools/versitygw"

go vet ./...
go test -count=1 -timeout 28m "$@" ./...
