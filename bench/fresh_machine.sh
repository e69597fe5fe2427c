#!/usr/bin/env bash
# The README's two commands as a fresh machine meets them: a clean clone of this checkout (../shared beside it, as in
# CI), no .venv, no browser on PATH and nothing installed by hand; `make tour`, then `make test-fast` (FULL=1: `make
# test`). Prints each step's wall time. Too slow for the suite itself (it builds a venv), so it lives here.
#   bash bench/fresh_machine.sh            # tour + test-fast, ~10 min on two cores
#   FULL=1 bash bench/fresh_machine.sh     # tour + the whole suite
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/iotrace-fresh.XXXXXX)"
git clone --quiet "$here" "$work/main"
ln -s "$(cd "$here/../shared" && pwd)" "$work/shared"
# A PATH without Chromium: the interpreter's own folder and every command of /usr/bin and /bin but the browser.
mkdir "$work/bin"
python_bin="$(dirname "$(python3 -c 'import sys; print(sys.executable)')")"
for dir in "$python_bin" /usr/local/bin /usr/bin /bin; do
  for tool in "$dir"/*; do
    name="$(basename "$tool")"
    case "$name" in chromium|chromium-browser|google-chrome*|chrome) continue ;; esac
    [ -e "$work/bin/$name" ] || ln -s "$tool" "$work/bin/$name"
  done
done
cd "$work/main"
step() {
  local start=$SECONDS
  echo "== $*"
  env -i HOME="$HOME" PATH="$work/bin" TERM=dumb "$@"
  echo "== $* took $((SECONDS - start)) s"
}
step make tour SYSTEM_DEPS=0
if [ "${FULL:-0}" = 1 ]; then step make test SYSTEM_DEPS=0; else step make test-fast SYSTEM_DEPS=0; fi
echo "fresh clone in $work (remove it when done)"
