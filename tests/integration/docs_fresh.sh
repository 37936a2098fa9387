#!/usr/bin/env bash
# CTest `docs_fresh` (label docs): the generated docs (docs/diffs/*.diff, the diffstat tables and the
# included snippets) match the tree. On failure, run dev/gen_diffs.sh and commit the result.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec dev/gen_diffs.sh --check
