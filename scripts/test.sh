#!/usr/bin/env bash
# The project's test command (README.md "Tests"): vet, the unit and golden
# tests, and the race detector on the concurrent packages.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
go test -count=1 ./...
