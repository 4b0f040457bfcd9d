#!/usr/bin/env bash
# Re-vendor force-graph from the npm registry: bash engine/view/vendor/update.sh 1.52.0
set -euo pipefail
version="${1:?usage: update.sh VERSION}"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack "force-graph@$version" >/dev/null && tar xzf "force-graph-$version.tgz")
cp "$tmp/package/dist/force-graph.min.js" "$here/force-graph.min.js"
cp "$tmp/package/LICENSE" "$here/LICENSE.force-graph"
sha256sum "$here/force-graph.min.js"
