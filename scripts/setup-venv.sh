#!/usr/bin/env bash
# Creates .venv with the Python tools the tests use, pinned:
#   moto[server]        AWS API server (the engine LocalStack uses) for the AWS provider tests
#   kubernetes-validate offline Kubernetes JSON-schema validation of deploy/
#   openstacksdk        the official OpenStack client, an outsider's view of mocks/openstack
#   tencentcloud-sdk-python-clb  the official Tencent CLB client, an outsider's view of mocks/tencent
#   bce-python-sdk      the official Baidu Cloud client (BLB, EIP, bce-auth-v1 signer) for mocks/baidu
#   kubernetes          the official Kubernetes Python client, an outsider's view of the API server
#   python-dateutil     pinned below 3: botocore (moto) refuses 4, which newer clients pull in
# Idempotent: reinstalls only when the pinned set changes.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=("moto[server]==5.2.5" "kubernetes-validate==1.37.0" "openstacksdk==4.22.0" "tencentcloud-sdk-python-clb==3.1.194" "bce-python-sdk==0.9.79" "kubernetes==33.1.0" "python-dateutil==2.9.0.post0")
stamp=".venv/.kube-lb-requirements"
wanted="${requirements[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  exit 0
fi
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check "${requirements[@]}"
echo "$wanted" > "$stamp"
