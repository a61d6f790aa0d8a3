# The prologue the kiln CLI test scripts share (sourced, from tests/run_*_cli.sh and
# run_check_names.sh): their one argument, the kiln binary, as $kiln; a scratch folder
# $work, removed on exit; fail MESSAGE prints it and counts it in $failed.
set -u
[ $# -eq 1 ] || { echo "usage: $0 KILN_BINARY" >&2; exit 2; }
kiln=$(realpath "$1") || exit 2
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
failed=0
fail() {
  echo "FAIL: $*"
  failed=$((failed + 1))
}
