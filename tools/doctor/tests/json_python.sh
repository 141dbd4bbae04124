#!/bin/sh
# Validate gdrnet-doctor --json with Python's json module (Debian's /usr/bin/python3; a pyenv python3
# on PATH may lack nothing here, but the system one is the known quantity). Skips (77) without it, and fails
# instead when CI=true (a missing test dependency must not pass CI).
set -eu
doctor=$1
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
if [ -z "$py" ]; then
  echo "json_python: no python3 (apt-get install python3)"
  case "${CI:-}" in true|TRUE|1) exit 1 ;; esac
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# live host (whatever it has) and an empty fabricated tree; both must be valid JSON with a verdict
for args in "--json" "--json --sysfs-root $tmp"; do
  set +e
  # shellcheck disable=SC2086
  NCCL_NET='x"y\z' "$doctor" $args >"$tmp/out.json"
  rc=$?
  set -e
  [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || { echo "exit $rc for $args"; exit 1; }
  "$py" - "$tmp/out.json" "$rc" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
assert doc["tool"] == "gdrnet-doctor"
assert isinstance(doc["findings"], list) and doc["findings"]
for f in doc["findings"]:
    assert set(f) >= {"id", "status", "title", "evidence", "fix"}, f
    assert f["status"] in ("OK", "INFO", "WARN", "FAIL"), f
fails = sum(f["status"] == "FAIL" for f in doc["findings"])
assert doc["problems"] == fails and doc["ready"] == (fails == 0) == (rc == 0), (fails, rc)
assert any(f["id"] == "env/NCCL_NET" and 'x"y\\z' in f["title"] for f in doc["findings"])
PY
  rm -rf "${tmp:?}"/*
done
echo "json_python: ok"
