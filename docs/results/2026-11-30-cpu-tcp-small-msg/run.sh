#!/bin/bash
# before/after, interleaved
cd /work/main
out=/tmp/lat-meas/r3
mkdir -p $out
uptime > $out/load-start.txt
for rep in 1 2 3 4 5; do
  for v in before after after-eager; do
    case $v in
      before) b=/tmp/lat-before/build; env="";;
      after) b=/tmp/lat-after/build; env="";;
      after-eager) b=/tmp/lat-after/build; env="GDRNET_TCP_EAGER_CREDITS=32";;
    esac
    env $env $b/bin/gdrnet-perf --local --transport tcp --sizes 8:65536:8 --json $out/perf-$v-$rep.json > $out/perf-$v-$rep.txt 2>&1
  done
done
uptime >> $out/load-start.txt
for v in before after after-eager; do
  case $v in
    before) b=/tmp/lat-before/build; env="";;
    after) b=/tmp/lat-after/build; env="";;
    after-eager) b=/tmp/lat-after/build; env="GDRNET_TCP_EAGER_CREDITS=32";;
  esac
  env $env bench/msgrate --build $b --transports tcp --json $out/msgrate-$v.json > $out/msgrate-$v.txt 2>&1
done
uptime >> $out/load-start.txt
echo done > $out/DONE
