#!/usr/bin/env bash
# The project's test command (README.md). Formatting, lints, then every test in the workspace
# with every provider feature enabled. Sets up moto's server in .venv for the AWS tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-venv.sh
bash scripts/setup-tools.sh
export KUBE_LB_MOTO_SERVER="${KUBE_LB_MOTO_SERVER:-$PWD/.venv/bin/moto_server}"

echo "== deploy/ manifests"
bash scripts/validate-deploy.sh
echo "== cargo fmt --check"
cargo fmt --all --check

# Clippy: the same lints as `cargo clippy --workspace --all-targets --all-features -- -D warnings`,
# but clippy-driver compiles the workspace's own crates while the tests build
# (RUSTC_WORKSPACE_WRAPPER and CLIPPY_ARGS, the mechanism `cargo clippy` itself uses). The
# dependencies are then compiled once, not a second time in check mode for `cargo clippy`, which
# saves about a quarter of a cold run. Any warning (rustc's or clippy's) fails the build.
clippy_driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [ -z "$clippy_driver" ]; then
  echo "clippy-driver not found: install the clippy component (rustup component add clippy)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
echo "== doc tests (workspace crates compiled by clippy-driver with -D warnings)"
cargo test --workspace --all-features --doc -q
echo "== benches: compile and lint (test profile)"
cargo test --workspace --all-features --benches --no-run -q
echo "== cargo nextest (workspace crates compiled by clippy-driver with -D warnings)"
cargo nextest run --workspace --all-features --no-fail-fast
