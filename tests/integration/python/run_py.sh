#!/bin/sh
# run_py.sh HVDRUN PYTHON PYTHONPATH SCRIPT [ARGS...]: runs SCRIPT on 2 local ranks.
# Exits 77 (CTest skip) with a visible message when PYTHON lacks torch.
hvdrun=$1; py=$2; pp=$3; shift 3
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  echo "SKIP: $py cannot import torch (install python3-torch)"; exit 77
fi
# HVD_TEST_NP / HVD_TEST_HOSTS: another layout than 2 ranks on localhost.
PYTHONPATH=$pp exec timeout 55 "$hvdrun" -np "${HVD_TEST_NP:-2}" -H "${HVD_TEST_HOSTS:-localhost:2}" "$py" "$@"
