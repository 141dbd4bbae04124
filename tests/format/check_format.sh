#!/bin/sh
# The format check (CTest format_check): every C source and header of the project, outside the paths listed in
# .clang-format-ignore (files not converted yet), must be exactly what clang-format makes of it with the
# .clang-format nearest to it (the top-level one; tests/verbs-emu has its own). Fails listing each file that differs,
# with the first lines of the difference and the command that fixes it.
#
# usage: check_format.sh <clang-format> <source dir> [--fix]
#   --fix   rewrite the covered files in place instead (what scripts/format.sh runs)
set -u
set -f # patterns of the ignore list are matched with case, never expanded as globs
cf=$1
src=$2
fix=${3:-}
cd "$src" || exit 2
ignore=.clang-format-ignore
[ -f "$ignore" ] || { echo "check_format: $src/$ignore is missing"; exit 2; }
# the ignore list: one path or shell pattern per line, relative to the top; '#' comments, blank lines (read once)
patterns=""
while IFS= read -r pat || [ -n "$pat" ]; do
  pat=${pat%%#*}
  while [ "${pat% }" != "$pat" ]; do pat=${pat% }; done
  [ -n "$pat" ] && patterns="$patterns$pat
"
done <"$ignore"
ignored() {
  for pat in $patterns; do
    # shellcheck disable=SC2254
    case "$1" in $pat) return 0 ;; esac
  done
  return 1
}
files=$(find plugin tools tests bench include -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null | LC_ALL=C sort)
n=0 bad=0 skipped=0
for f in $files; do
  if ignored "$f"; then skipped=$((skipped + 1)); continue; fi
  n=$((n + 1))
  if [ "$fix" = "--fix" ]; then
    "$cf" -i --style=file "$f" || exit 1
    continue
  fi
  out=$("$cf" --style=file "$f" | diff -u "$f" - | sed -n '3,14p')
  if [ -n "$out" ]; then
    bad=$((bad + 1))
    echo "MISFORMATTED: $f"
    printf '%s\n' "$out" | sed 's/^/    /'
  fi
done
# an ignore entry that names no file any more is stale
stale=0
for pat in $patterns; do
  hit=0
  for f in $files; do
    # shellcheck disable=SC2254
    case "$f" in $pat) hit=1; break ;; esac
  done
  if [ "$hit" -eq 0 ]; then echo "STALE: $ignore names $pat, which matches no file"; stale=$((stale + 1)); fi
done
[ "$fix" = "--fix" ] && { echo "check_format: $n file(s) formatted, $skipped left alone (.clang-format-ignore)"; exit 0; }
echo "check_format: $n file(s) checked with $($cf --version | head -n 1), $bad misformatted, $skipped not converted yet (.clang-format-ignore), $stale stale ignore entr(y|ies)"
if [ "$bad" -ne 0 ]; then
  echo "fix: scripts/format.sh (clang-format -i --style=file on the covered files), or list a file in $ignore"
  exit 1
fi
[ "$stale" -eq 0 ] || exit 1
exit 0
