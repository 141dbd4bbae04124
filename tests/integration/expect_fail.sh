#!/bin/sh
# expect_fail.sh RC REGEX CMD [ARGS...]: runs CMD, passes when it exits with RC and its output (stdout and
# stderr) matches the extended regular expression REGEX. For the self-checks: a check that should catch
# damaged data must fail, and say why.
rc_want=$1
regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$rc_want" ]; then
  echo "expect_fail: exit status $rc, expected $rc_want" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_fail: no output line matches: $regex" >&2
  exit 1
fi
echo "expect_fail: failed as expected (status $rc, output matches)"
