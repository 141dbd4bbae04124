#!/bin/sh
# Formats every C file the format check covers (all but those in .clang-format-ignore) with clang-format 14 and the
# nearest .clang-format. To convert a file: delete its line from .clang-format-ignore, then run this.
set -eu
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
[ -n "$cf" ] || { echo "format.sh: clang-format not found (apt-get install clang-format)"; exit 2; }
exec sh tests/format/check_format.sh "$cf" "$PWD" --fix
