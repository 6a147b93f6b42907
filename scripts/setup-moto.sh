#!/usr/bin/env bash
# Creates .venv with moto's server (the engine LocalStack uses) for the AWS provider tests.
# Idempotent: does nothing when the venv already has it.
set -euo pipefail
cd "$(dirname "$0")/.."
MOTO_VERSION="${MOTO_VERSION:-5.2.5}"
if [ -x .venv/bin/moto_server ]; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check "moto[server]==${MOTO_VERSION}"
