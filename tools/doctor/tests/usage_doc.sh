#!/bin/sh
# docs/doctor.md's usage line is the one `gdrnet-doctor --help` prints, and its option table has a row for each
# option that line names: the page cannot drop an option (as it once dropped --version).
# usage: usage_doc.sh <gdrnet-doctor> <docs/doctor.md>
set -u
doctor=$1
doc=$2
line=$("$doctor" --help 2>&1 | sed -n 's/^usage: //p' | head -n 1)
if [ -z "$line" ]; then
  echo "FAIL: $doctor --help printed no 'usage: ' line"
  exit 1
fi
if ! grep -qxF -- "$line" "$doc"; then
  echo "FAIL: $doc does not have the usage line of --help: $line"
  echo "it has: $(grep -n '^gdrnet-doctor ' "$doc")"
  exit 1
fi
fails=0
for opt in $(printf '%s\n' "$line" | grep -o -- '--[a-z-]*'); do
  if ! grep -q -- "^| \`$opt" "$doc"; then
    echo "FAIL: $doc: no row for $opt in the option table"
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] || exit 1
echo "usage_doc: ok: $line"
