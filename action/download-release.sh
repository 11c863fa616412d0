#!/usr/bin/env bash
# Installs a released ocm-lab binary: downloads the archive for this runner and the release's SHA256SUMS,
# checks the archive against its line there, and only then unpacks ocm-lab into DEST/bin. Nothing is put in
# DEST when any of this fails. The repository's action (action.yml, input `version`) runs it; the asset names
# are the ones .github/workflows/release.yml publishes.
#
# Usage: download-release.sh BASE_URL VERSION OS ARCH DEST
#   BASE_URL  where the release's assets are, e.g. https://github.com/ocm-lab/ocm-lab/releases/download/v0.1.0
#   VERSION   the release, without the v: 0.1.0
#   OS ARCH   the runner's, as GitHub names them (RUNNER_OS: Linux, macOS; RUNNER_ARCH: X64, ARM64)
#   DEST      the folder to install into (DEST/bin/ocm-lab)
set -euo pipefail

fail() {
  echo "::error title=ocm-lab action::$1" >&2
  exit 1
}

[ $# -eq 5 ] || fail "usage: download-release.sh BASE_URL VERSION OS ARCH DEST"
base=${1%/} version=$2 os=$3 arch=$4 dest=$5

case "$os/$arch" in
  Linux/X64) target=x86_64-unknown-linux-musl ;;
  Linux/ARM64) target=aarch64-unknown-linux-musl ;;
  macOS/X64) target=x86_64-apple-darwin ;;
  macOS/ARM64) target=aarch64-apple-darwin ;;
  *) fail "no ocm-lab release binary for $os on $arch (there are for Linux and macOS, X64 and ARM64): build from source instead (leave input version empty, or give input source)" ;;
esac

asset="ocm-lab-$target-v$version.tgz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() {
  curl --fail --silent --show-error --location --retry 3 --connect-timeout 20 \
    --output "$work/$1" "$base/$1" \
    || fail "cannot download $base/$1: is $version an ocm-lab release (a tag v$version with assets)?"
}
fetch "$asset"
fetch SHA256SUMS

# sha256sum's format: `<hex>  <file>` (or `<hex> *<file>` in binary mode).
want=$(awk -v a="$asset" '$2 == a || $2 == "*" a { print $1; exit }' "$work/SHA256SUMS")
[[ $want =~ ^[0-9a-f]{64}$ ]] || fail "SHA256SUMS of release $version has no checksum for $asset"
if command -v sha256sum >/dev/null 2>&1; then
  got=$(sha256sum "$work/$asset")
else
  got=$(shasum -a 256 "$work/$asset")
fi
got=${got%% *}
[ "$got" = "$want" ] || fail "$asset does not match SHA256SUMS of release $version (sha256 $got, expected $want): not installed"

tar -xzf "$work/$asset" -C "$work"
binary="$work/ocm-lab-$target-v$version/ocm-lab"
[ -f "$binary" ] || fail "$asset holds no ocm-lab-$target-v$version/ocm-lab"
mkdir -p "$dest/bin"
install -m 0755 "$binary" "$dest/bin/ocm-lab"
echo "ocm-lab $version ($target) installed into $dest/bin, sha256 $got"
