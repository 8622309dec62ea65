#!/usr/bin/env bash
# The project's test command (README.md "Tests"): vet, every package's tests,
# and the concurrent packages again under the race detector (-short there to
# keep the run quick; the full versions ran in the plain pass).
set -euo pipefail
cd "$(dirname "$0")/.."
# The SDK integration tests (tests/sdk) run the real npm client packages,
# pinned in tests/sdk/package-lock.json. Without Node they fail; a
# developer may set KVSERVE_SKIP_NODE=1 to skip them (ignored in CI). None
# of the packages needs an install script, so none is run.
if ! command -v npm >/dev/null 2>&1 && [ "${KVSERVE_SKIP_NODE:-}" != 1 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	# A machine without Node: take Debian's (the tests need Node 20 or later
	# and say so if Debian's is older).
	apt-get install -y -q nodejs npm >/dev/null || echo "test.sh: could not install nodejs/npm" >&2
fi
if [ "${KVSERVE_SKIP_NODE:-}" = 1 ] && [ -z "${CI:-}" ]; then
	echo "test.sh: KVSERVE_SKIP_NODE=1: not installing the SDK test packages" >&2
elif command -v npm >/dev/null 2>&1; then
	npm ci --prefix tests/sdk --no-audit --no-fund --ignore-scripts
fi
go vet ./...
go test -count=1 ./...
go test -count=1 -race -short ./internal/kv/... ./internal/model/... ./internal/engine/... ./internal/tensor/... ./internal/api/... ./internal/sim/... ./internal/constrain/...
