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
command -v npm >/dev/null 2>&1 || need+=(npm) # installs the MCP inspector's CLI (tests/mcp)
command -v git >/dev/null 2>&1 || need+=(git) # imports of worktrees, patches and apply are checked with the real git
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd) # verifies the generated systemd --user unit
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

# The MCP inspector's CLI, a real MCP client the tests of `branchnfs mcp`
# drive it with (tests/mcp): installed from npm once per version, beside
# versitygw. The package directory is world-readable: the server it starts
# runs as a regular user.
inspector_version=1.0.3
inspector="$(go env GOCACHE)/../branchnfs-tools/mcp-inspector-cli-$inspector_version"
if [ ! -f "$inspector/node_modules/@modelcontextprotocol/inspector-cli/build/index.js" ] && command -v npm >/dev/null 2>&1; then
	echo "test.sh: installing @modelcontextprotocol/inspector-cli@$inspector_version into $inspector"
	rm -rf "$inspector"
	mkdir -p "$inspector"
	if ! npm install --prefix "$inspector" --no-audit --no-fund --silent "@modelcontextprotocol/inspector-cli@$inspector_version"; then
		echo "test.sh: could not install the MCP inspector: tests/mcp will skip it (and fail when CI=true)" >&2
		rm -rf "$inspector"
	fi
fi
export BRANCHNFS_MCP_INSPECTOR="$inspector/node_modules/@modelcontextprotocol/inspector-cli"
# goreleaser, pinned in tools/go.mod (a module of its own: its
# dependencies would raise versions the server builds with), built once per
# version like versitygw; `goreleaser check` validates .goreleaser.yaml.
goreleaser_version=$(awk '$1 == "github.com/goreleaser/goreleaser/v2" {print $2}' tools/go.mod)
goreleaser="$(go env GOCACHE)/../branchnfs-tools/goreleaser-$goreleaser_version/goreleaser"
if [ ! -x "$goreleaser" ]; then
	echo "test.sh: building goreleaser $goreleaser_version (once per machine, several minutes)"
	mkdir -p "$(dirname "$goreleaser")"
	(cd tools && GOFLAGS= go build -o "$goreleaser.tmp" github.com/goreleaser/goreleaser/v2)
	mv "$goreleaser.tmp" "$goreleaser"
fi
"$goreleaser" check

go vet ./...
go test -count=1 -timeout 28m "$@" ./...
