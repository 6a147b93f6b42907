#!/usr/bin/env bash
# The project's test command (README.md). Formatting, lints, then every test in the workspace
# with every provider feature enabled. Sets up moto's server in .venv for the AWS tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-venv.sh
export KUBE_LB_MOTO_SERVER="${KUBE_LB_MOTO_SERVER:-$PWD/.venv/bin/moto_server}"

echo "== deploy/ manifests"
bash scripts/validate-deploy.sh
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== doc tests"
cargo test --workspace --all-features --doc -q
echo "== cargo nextest"
cargo nextest run --workspace --all-features --no-fail-fast
