#!/bin/bash
# Device run 26 (2026-12-07): the credit change (cf54710) against the plugin before it, beside Socket.
#   run26.sh build                 run23.sh build, and the plugin of main 995e3a9 (git archive 995e3a9 into
#                                  build-old-src/, carried) into build-old-src/b
#   run26.sh matrix NAME ROWS REPS VARIANT...   as run23.sh matrix; the variant "old" (alone, or old,K=V,...)
#                                  is the 995e3a9 build, the others this tree's
# run27.sh does the same (and more with THREADS=1): this is it, without THREADS.
unset THREADS
exec bash "$(dirname "$0")/run27.sh" "$@"
