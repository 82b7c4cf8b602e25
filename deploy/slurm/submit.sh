#!/bin/sh
# A sharded rollout run on Slurm, as one command: the shards as a job array, and the merge as a
# job that starts when the array has ended, whichever way (afterany). Prints the two job ids.
#   SHARDS=4 INPUT=tasks.jsonl OUT=/shared/run MODEL_URL=http://vllm:8000/v1 MODEL=Qwen/Qwen3-8B \
#     SERVER=http://gym:8000 RUN_ARGS="--num-repeats 4" deploy/slurm/submit.sh
# Over-sharding: CLAIM=16 runs the job in 16 shards over the SHARDS tasks (rollout-array.sbatch).
# Settings: see rollout-array.sbatch. Extra sbatch options (partition, account) go in
# SBATCH_ARGS.
set -eu
: "${SHARDS:?set SHARDS, the number of shards}"
case $SHARDS in '' | *[!0-9]* | 0)
	echo "submit.sh: SHARDS=$SHARDS: want a whole number from 1" >&2
	exit 2
	;;
esac
dir=$(dirname "$0")
# shellcheck disable=SC2086 # SBATCH_ARGS is a list of options
array=$(sbatch --parsable ${SBATCH_ARGS:-} --array="0-$((SHARDS - 1))" --export=ALL "$dir/rollout-array.sbatch")
array=${array%%;*} # "id;cluster" on a multi-cluster setup
# shellcheck disable=SC2086
merge=$(sbatch --parsable ${SBATCH_ARGS:-} --dependency="afterany:$array" --export=ALL "$dir/merge.sbatch")
echo "$array ${merge%%;*}"
