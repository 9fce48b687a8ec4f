#!/usr/bin/env bash
# The start of a GPU window's command on an offline node, shared by scripts/gpu_benchmarks.sh and
# scripts/gpu_queue.sh:
#   scripts/gpu_node.sh "MODULE..." COMMAND [ARG...]
# takes `--wheels DIR` out of the ARGs wherever it stands and installs DIR's wheels when a MODULE does not import
# (scripts/install_wheels.sh; $PYTHON, default python3), puts this checkout first on PYTHONPATH (its pe_plugin and
# pe_tools, not a wheel's), then runs COMMAND with the other ARGs.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 \"MODULE...\" COMMAND [ARG...]" >&2
  exit 2
fi
read -r -a modules <<< "$1"
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
wheels="" rest=()
while [ $# -gt 0 ]; do
  case $1 in
    --wheels) wheels=${2:?--wheels needs a folder}; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
if [ -n "$wheels" ]; then
  "$repo/scripts/install_wheels.sh" "$wheels" "${modules[@]}" || exit 1  # nothing when every MODULE imports
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "${rest[@]}"
