#!/usr/bin/env bash
# Copies the generated manifests the Helm chart ships into the chart, so that the chart never drifts
# from what controller-gen produces (`make manifests`):
#   config/crd/bases/*.yaml  -> charts/callback-platform/crds/
#   config/rbac/role.yaml    -> charts/callback-platform/files/manager-role.yaml
# test/chart fails when they differ. Usage: hack/sync-chart-crds.sh (or `make chart-crds`).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="${root}/charts/callback-platform"

mkdir -p "${chart}/crds" "${chart}/files"
# Remove CRDs that no longer exist upstream, then copy the current ones.
find "${chart}/crds" -maxdepth 1 -name '*.yaml' -type f -delete
cp "${root}"/config/crd/bases/*.yaml "${chart}/crds/"
cp "${root}/config/rbac/role.yaml" "${chart}/files/manager-role.yaml"
echo "synced $(ls "${chart}/crds" | wc -l) CRD(s) and the manager role into ${chart#"${root}"/}"
