#!/bin/sh
# ThreadSanitizer run of dp's threaded code (issue 14): the group, loader,
# plugin, engine and CPU distributed tests, in a TSan build of their own.
#
#     tests/tsan/run.sh BUILD_DIR        # e.g. tests/tsan/run.sh build-tsan
#
# Configures BUILD_DIR if it is not a meson build directory yet, builds only
# the executables these tests run, and runs them. Exits non-zero on a failing
# test, which includes any TSan report (halt_on_error=1 makes the reporting
# process exit 66; a rank or `dp` process that reports makes its test fail).
# See tests/tsan/README.md.
set -eu

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$(mkdir -p "$1" && cd "$1" && pwd)  # absolute: the tests run in it
src=$(cd "$(dirname "$0")/../.." && pwd)

t0=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$src" -Db_sanitize=thread -Dbuildtype=debugoptimized -Db_lundef=false -Dcuda=disabled
fi

# Only what the tests below run: their executables, the plugins and fixtures
# test_plugins loads (every shared module under plugins/ and tests/plugins/,
# read from meson's introspection so that a new fixture is never left out),
# and the dp command dist_launch starts.
modules=$(meson introspect --targets "$build" | python3 -c '
import json, os, sys
build = sys.argv[1]
for t in json.load(sys.stdin):
    if t["type"] != "shared module":
        continue
    for f in t["filename"]:
        rel = os.path.relpath(f, build)
        if rel.startswith(("plugins/", "tests/plugins/")):
            print(rel)
' "$build")
if [ -z "$modules" ]; then
  echo "$0: meson introspect listed no plugin modules in $build" >&2
  exit 1
fi
targets="tests/test_workers tests/test_capi tests/test_equivalence tests/test_faults tests/test_training_knobs
  tests/data/test_data
  $modules
  tests/plugins/test_plugins
  tests/engine/test_local_comm tests/engine/test_model_sync
  tests/dist/test_dist_store tests/dist/test_dist_gloo tests/dist/test_dist_train
  src/cli/dp"
tests='workers capi equivalence faults training_knobs data plugins local_comm model_sync dist_store dist_gloo dist_train dist_launch'

# shellcheck disable=SC2086
ninja -C "$build" $targets
t1=$(date +%s)
echo "$0: configure and build: $((t1 - t0)) s"

# halt_on_error: the first report ends the process (non-zero). Reports also
# go to files under $build/tsan-logs, so that one from a process whose exit
# status a test does not check (a rank killed on purpose, a `dp` a test
# expects to fail) still fails this run. Suppressions: third-party code only.
logs=$build/tsan-logs
rm -rf "$logs"
mkdir -p "$logs"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$src/tests/tsan/suppressions.txt log_path=$logs/tsan${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
export TSAN_OPTIONS
status=0
# shellcheck disable=SC2086
meson test -C "$build" --no-rebuild --print-errorlogs --timeout-multiplier 4 $tests || status=$?
echo "$0: tests: $(($(date +%s) - t1)) s"
if [ -n "$(ls -A "$logs")" ]; then
  for f in "$logs"/*; do
    echo "== $f" >&2
    cat "$f" >&2
  done
  echo "$0: ThreadSanitizer reports above ($(ls "$logs" | wc -l) processes)" >&2
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
