# Triton's Python client (issue 27, docs/kserve.md): the independent client
# the Open Inference Protocol fronts are tested with (reefd/tests/kserve.rs
# runs reefd/tests/kserve_client.py in this venv). Pinned so a client change
# is a deliberate one.
"$REEF_ROOT/.venv/bin/pip" install --quiet --disable-pip-version-check \
    "tritonclient[http,grpc]==2.73.0"
