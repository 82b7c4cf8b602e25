#!/bin/sh
# Starts app.py without NeMo Gym installed: on the files of NeMo Gym vendored in
# cmd/rollout/testdata/nemo_gym (see the NOTICE there), with its config handed over as NeMo Gym's
# ng_run hands it to a resources server it starts: the global config (configs/cart.yaml, with
# the host and port) in $NEMO_GYM_CONFIG_DICT, the server's name in $NEMO_GYM_CONFIG_PATH.
# Needs Debian's python3-fastapi, python3-uvicorn, python3-pydantic, python3-itsdangerous and
# python3-yaml; $PYTHON names another interpreter that has them.
#
# usage: examples/cart_nemo_gym/serve.sh --addr HOST:PORT
set -eu
if [ "$#" -ne 2 ] || [ "$1" != --addr ] || [ "${2%:*}" = "$2" ]; then
	echo "usage: $0 --addr HOST:PORT" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
NEMO_GYM_CONFIG_PATH=cart_resources_server
NEMO_GYM_CONFIG_DICT="$(cat "$here/configs/cart.yaml")
      host: ${2%:*}
      port: ${2##*:}"
PYTHONPATH="$here/../../cmd/rollout/testdata/nemo_gym"
PYTHONDONTWRITEBYTECODE=1
export NEMO_GYM_CONFIG_PATH NEMO_GYM_CONFIG_DICT PYTHONPATH PYTHONDONTWRITEBYTECODE
cd "$here"
exec "${PYTHON:-/usr/bin/python3}" app.py
