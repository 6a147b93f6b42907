#!/usr/bin/env bash
# Creates .venv with the Python tools the tests use, pinned:
#   moto[server]        AWS API server (the engine LocalStack uses) for the AWS provider tests
#   kubernetes-validate offline Kubernetes JSON-schema validation of deploy/
#   openstacksdk        the official OpenStack client, an outsider's view of mocks/openstack
# Idempotent: reinstalls only when the pinned set changes.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=("moto[server]==5.2.5" "kubernetes-validate==1.37.0" "openstacksdk==4.22.0")
stamp=".venv/.kube-lb-requirements"
wanted="${requirements[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check "${requirements[@]}"
echo "$wanted" > "$stamp"
