#!/usr/bin/env bash
# Unpacks tools the tests run that cannot be installed system-wide beside the ones already there:
#   .tools/kubectl-1.20/usr/bin/kubectl   Debian bookworm's kubectl 1.20 (package
#                                         kubernetes-client), for the OpenAPI v2 compatibility
#                                         tests; it conflicts with the installed kubectl 1.32,
#                                         so it is unpacked, not installed.
# Idempotent: does nothing when the binary is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=".tools/kubectl-1.20"
if [ -x "$dest/usr/bin/kubectl" ]; then
  exit 0
fi
command -v apt-get >/dev/null 2>&1 || { echo "setup-tools: apt-get not found; kubectl 1.20 not unpacked" >&2; exit 0; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A fresh machine may have no package lists yet; update once and retry. Failing here is not
# fatal: the tests that need the binary skip loudly, or fail under CI=true naming this script.
if ! (cd "$work" && apt-get download -qq kubernetes-client >/dev/null 2>&1); then
  if ! { apt-get update -qq && (cd "$work" && apt-get download -qq kubernetes-client); }; then
    echo "setup-tools: could not download Debian's kubernetes-client; kubectl 1.20 not unpacked" >&2
    exit 0
  fi
fi
mkdir -p "$dest"
dpkg-deb -x "$work"/kubernetes-client_*.deb "$dest"
"$dest/usr/bin/kubectl" version --client >/dev/null
echo "setup-tools: $("$dest/usr/bin/kubectl" version --client --short 2>/dev/null || true) in $dest"
