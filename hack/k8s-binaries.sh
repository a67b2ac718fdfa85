#!/usr/bin/env bash
# Builds the Kubernetes test binaries from the Go module proxy (prebuilt ones cannot be downloaded
# here) and caches them outside the repository, keyed by version.
#
#   hack/k8s-binaries.sh envtest   kube-apiserver + etcd (what envtest needs)
#   hack/k8s-binaries.sh cluster   the above + kube-controller-manager, kube-scheduler, kwok, kwokctl
#   hack/k8s-binaries.sh metrics   the above + metrics-server (kwokctl --enable-metrics-server; HPA demo)
#
# Prints the folder holding the binaries on its last line (use it as KUBEBUILDER_ASSETS).
# Cold: about 15 minutes for etcd + kube-apiserver on 2 cores (measured: 16 min with an empty module cache); warm: seconds.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
METRICS_SERVER_VERSION=${METRICS_SERVER_VERSION:-v0.9.0}
what=${1:-envtest}

cache=${CALLBACK_PLATFORM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/callback-platform}
bin="$cache/k8s/$K8S_VERSION-etcd$ETCD_VERSION-kwok$KWOK_VERSION"
src="$cache/k8s-src/$K8S_VERSION"
mkdir -p "$bin" "$src"

log() { echo "k8s-binaries: $*" >&2; }

prepare_wrapper() {
  [ -f "$src/go.sum" ] && [ -f "$src/.ready" ] && return 0
  log "preparing wrapper module for k8s.io/kubernetes $K8S_VERSION in $src"
  local gomod
  gomod=$(cd "$src" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -n "$gomod" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
  {
    echo "module callbackplatform.local/k8sbin"
    echo
    echo "go 1.26"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # Every staging module that k8s.io/kubernetes replaces with ./staging/... is pinned to the
    # published module of the matching version.
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$gomod" | awk -v v="$STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } > "$src/go.mod"
  local n
  n=$(grep -c '^replace' "$src/go.mod")
  [ "$n" -gt 20 ] || { log "expected the staging replace list in $gomod, found $n lines"; exit 1; }
  cat > "$src/main.go" <<'GO'
// Package main only exists so that one go.sum covers every Kubernetes command built here.
package main

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {}
GO
  (cd "$src" && go mod tidy)
  touch "$src/.ready"
}

ldflags() {
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}

build_kube() {
  local name=$1
  [ -x "$bin/$name" ] && return 0
  prepare_wrapper
  log "building $name $K8S_VERSION (first time only)"
  (cd "$src" && go build -trimpath -ldflags "$(ldflags)" -o "$bin/$name.tmp" "k8s.io/kubernetes/cmd/$name")
  mv "$bin/$name.tmp" "$bin/$name"
}

build_etcd() {
  [ -x "$bin/etcd" ] && return 0
  local esrc="$cache/etcd-src/$ETCD_VERSION"
  mkdir -p "$esrc"
  log "building etcd $ETCD_VERSION (first time only)"
  if [ ! -f "$esrc/go.sum" ]; then
    printf 'module callbackplatform.local/etcdbin\n\ngo 1.26\n' > "$esrc/go.mod"
    cat > "$esrc/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    (cd "$esrc" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy)
  fi
  (cd "$esrc" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$bin/etcd.tmp" "$bin/etcd"
}

build_kwok() {
  [ -x "$bin/kwok" ] && [ -x "$bin/kwokctl" ] && return 0
  log "building kwok and kwokctl $KWOK_VERSION (first time only)"
  GOBIN="$bin" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
}

build_metrics_server() {
  if [ ! -x "$bin/metrics-server" ]; then
    log "building metrics-server $METRICS_SERVER_VERSION (first time only)"
    # The version flag lets kwokctl read the version; metrics-server has no replace lines, so it installs as is.
    GOBIN="$bin" go install -trimpath \
      -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
      "sigs.k8s.io/metrics-server/cmd/metrics-server@$METRICS_SERVER_VERSION"
  fi
  # kwokctl registers metrics-server from its release manifest, which it would download; the same
  # objects (RBAC, Service, APIService) come with the module source, so they are cached here.
  [ -s "$bin/metrics-server-components.yaml" ] && return 0
  local msdir
  msdir=$(cd "$cache" && GOFLAGS= go mod download -json "sigs.k8s.io/metrics-server@$METRICS_SERVER_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -n "$msdir" ] && [ -f "$msdir/manifests/base/apiservice.yaml" ] || { log "metrics-server $METRICS_SERVER_VERSION manifests not found in the module cache"; exit 1; }
  for f in rbac service apiservice; do
    echo "---"
    cat "$msdir/manifests/base/$f.yaml"
  done > "$bin/metrics-server-components.yaml.tmp"
  mv "$bin/metrics-server-components.yaml.tmp" "$bin/metrics-server-components.yaml"
}

case "$what" in
  envtest)
    build_etcd
    build_kube kube-apiserver
    ;;
  cluster)
    build_etcd
    build_kube kube-apiserver
    build_kube kube-controller-manager
    build_kube kube-scheduler
    build_kwok
    ;;
  metrics)
    build_etcd
    build_kube kube-apiserver
    build_kube kube-controller-manager
    build_kube kube-scheduler
    build_kwok
    build_metrics_server
    ;;
  metrics-server)
    build_metrics_server
    ;;
  *) log "usage: $0 envtest|cluster|metrics|metrics-server"; exit 2 ;;
esac
echo "$bin"
