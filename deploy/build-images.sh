#!/usr/bin/env bash
# Builds the toolbus and NATS server images FROM scratch out of static
# binaries built here. No registry is needed: nothing is pulled.
#
#   deploy/build-images.sh            # toolbus:dev and toolbus-nats:dev
#   TAG=1.2.3 deploy/build-images.sh  # toolbus:1.2.3 and toolbus-nats:1.2.3
#
# SRC names the module to build (default: the repository holding this
# script); each image's build context is a temporary directory with only
# its binaries and its Dockerfile.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="${SRC:-$(dirname "$here")}"
tag="${TAG:-dev}"
export PATH="$PATH:/usr/local/go/bin"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/toolbus" "$ctx/nats/data"

echo "== go build: toolbus, nats-server (static)"
(
  cd "$src"
  export CGO_ENABLED=0 GOOS=linux
  go build -trimpath -ldflags='-s -w' -o "$ctx/toolbus/toolbus" ./cmd/toolbus
  go build -trimpath -ldflags='-s -w' -o "$ctx/nats/nats-server" github.com/nats-io/nats-server/v2
)
cp "$ctx/toolbus/toolbus" "$ctx/nats/toolbus"
cp "$here/toolbus.Dockerfile" "$ctx/toolbus/Dockerfile"
cp "$here/nats.Dockerfile" "$ctx/nats/Dockerfile"

echo "== docker build: toolbus:$tag, toolbus-nats:$tag"
docker build --quiet -t "toolbus:$tag" "$ctx/toolbus"
docker build --quiet -t "toolbus-nats:$tag" "$ctx/nats"
