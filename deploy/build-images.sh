#!/usr/bin/env bash
# Builds the toolbus and NATS server images FROM scratch out of static
# binaries built here. No registry is needed: nothing is pulled.
#
# Image tags belong to the whole Docker daemon, so each checkout builds
# its own: dev-<the first 12 hex digits of the SHA-256 of the checkout's
# path>, unless TOOLBUS_IMAGE_TAG names another. The compose file, the
# integration suite and .ci/run find the images by the same variable.
#
#   deploy/build-images.sh                          # toolbus:dev-<hash>, toolbus-nats:dev-<hash>
#   TOOLBUS_IMAGE_TAG=1.2.3 deploy/build-images.sh  # toolbus:1.2.3, toolbus-nats:1.2.3
#   deploy/build-images.sh --tag                    # prints the tag, builds nothing
#   export TOOLBUS_IMAGE_TAG="$(deploy/build-images.sh --tag)"   # before docker compose
#
# SRC names the module to build (default: the repository holding this
# script), and the checkout whose path names the tag; each image's build
# context is a temporary directory with only its binaries and its
# Dockerfile.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "${SRC:-$(dirname "$here")}" && pwd -P)"

sha256() {
  if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi
}

tag="${TOOLBUS_IMAGE_TAG:-}"
if [ -z "$tag" ]; then
  tag="dev-$(printf '%s' "$src" | sha256 | cut -c1-12)"
fi
if ! [[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
  echo "build-images.sh: TOOLBUS_IMAGE_TAG=\"$tag\" is not a Docker tag: use letters, digits, _, . and - (at most 128, not starting with . or -), or unset it for this checkout's own tag" >&2
  exit 2
fi

case "${1:-}" in
  --tag)
    echo "$tag"
    exit 0
    ;;
  "") ;;
  *)
    echo "build-images.sh: unknown argument \"$1\": the only one is --tag, which prints the tag this checkout builds" >&2
    exit 2
    ;;
esac

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
echo "built toolbus:$tag and toolbus-nats:$tag"
if [ -z "${TOOLBUS_IMAGE_TAG:-}" ]; then
  echo "docker compose runs them with: export TOOLBUS_IMAGE_TAG=$tag"
fi
