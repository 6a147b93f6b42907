#!/usr/bin/env bash
# Validates deploy/ as code: every kustomize overlay renders, and every rendered object passes
# strict schema validation for the pinned Kubernetes version.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION="${K8S_VERSION:-1.32.0}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for overlay in deploy/overlays/*/; do
  name=$(basename "$overlay")
  if ! kubectl kustomize "$overlay" > "$out/$name.yaml"; then
    echo "deploy: overlay $name does not render"; status=1; continue
  fi
  # Least privilege: the IPPool and Namespace grants (components/local-pools) belong to the
  # overlays running the local provider only; tests/integration/deploy_rbac.rs checks every
  # overlay's controller grants against what the controller requests with that --cloud.
  case "$name" in
    local|bare-metal) ;;
    *) if grep -q 'kube-lb-controller-local-pools' "$out/$name.yaml"; then
         echo "deploy: overlay $name grants the local provider's IPPool/Namespace access"; status=1; continue
       fi ;;
  esac
  # The BGP components (the proxy's BGP kinds and its one Secret; FRR beside the proxy) belong
  # to bare-metal only; tests/integration/deploy_bgp.rs checks the sidecar itself.
  if [ "$name" != bare-metal ] && grep -q 'kube-lb-proxy-bgp' "$out/$name.yaml"; then
    echo "deploy: overlay $name grants the proxy's BGP access"; status=1; continue
  fi
  if [ "$name" != bare-metal ] && grep -qE 'quay.io/frrouting/frr|kube-lb-frr|- --bgp$' "$out/$name.yaml"; then
    echo "deploy: overlay $name runs FRR or the proxy's BGP speaker"; status=1; continue
  fi
  if [ "$name" = bare-metal ] && ! grep -q 'quay.io/frrouting/frr:' "$out/$name.yaml"; then
    echo "deploy: overlay bare-metal has no FRR sidecar"; status=1; continue
  fi
  if ! .venv/bin/kubernetes-validate --quiet --strict -k "$K8S_VERSION" "$out/$name.yaml"; then
    echo "deploy: overlay $name fails schema validation"; status=1; continue
  fi
  echo "deploy: overlay $name renders $(grep -c '^kind:' "$out/$name.yaml") objects, all valid for Kubernetes $K8S_VERSION"
done
exit $status
