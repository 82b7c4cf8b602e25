#!/usr/bin/env bash
# Builds the Kubernetes check (check_test.go: a kube-apiserver with an embedded etcd, the Job
# controller and kubectl, all of the k8s.io/kubernetes version in go.mod, from the Go module
# proxy) into one test binary and caches it:
#
#   internal/k8scheck/build.sh            # prints the cache directory (builds when needed)
#   internal/k8scheck/build.sh --cached   # prints it if the build is there, else exits 1
#
# The cache is $ROLLOUT_K8S_CACHE (default $HOME/.cache/rollout-k8s)/<kubernetes version>,
# keyed by this directory's go.mod, go.sum and Go files: a cache of other sources is rebuilt.
# The first build takes about 12 minutes of CPU (see docs/kubernetes.md); it needs Go only.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")"
root="${ROLLOUT_K8S_CACHE:-$HOME/.cache/rollout-k8s}"
dir="$root/$version"
key="$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)"

if [ -x "$dir/k8scheck.test" ] && [ "$(cat "$dir/KEY" 2>/dev/null)" = "$key" ]; then
	echo "$dir"
	exit 0
fi
if [ "${1:-}" = --cached ]; then
	exit 1
fi
command -v go >/dev/null 2>&1 || { echo "k8scheck/build.sh: go is not installed" >&2; exit 3; }

mkdir -p "$root"
work="$(mktemp -d "$root/build-$version.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "k8scheck/build.sh: building kube-apiserver, etcd, the Job controller and kubectl ($version) into one test binary; about 12 minutes of CPU the first time" >&2
start=$(date +%s)
(cd "$here" && GOWORK=off GOFLAGS=-mod=readonly go test -c -o "$work/k8scheck.test" .)
echo "k8s.io/kubernetes $version" >"$work/VERSION"
echo "$key" >"$work/KEY"
rm -rf "$dir"
mv "$work" "$dir"
trap - EXIT
echo "k8scheck/build.sh: cached in $dir ($(($(date +%s) - start))s)" >&2
echo "$dir"
