#!/bin/sh
# The merge of a sharded run, as one command, run where kubectl reaches the cluster:
#   deploy/kubernetes/merge.sh
# It waits until job/rollout-shards has ended, Complete or Failed (a Job with failed indexes is
# Failed and never Complete), then starts the merge Job of merge-job.yaml with the shards' own
# image: after Complete a full merge; after Failed a --partial one, which merges the finished
# shards, names the missing ones and leaves the merged run marked incomplete. It then waits
# for the merge and prints its log; its exit status is the merge's.
# NAMESPACE (rollout), TIMEOUT (seconds to wait for each Job, 86400), POLL (seconds, 10).
set -eu
ns=${NAMESPACE:-rollout}
timeout=${TIMEOUT:-86400}
poll=${POLL:-10}
dir=$(dirname "$0")

# ended JOB: waits until JOB is Complete or Failed, and prints which.
ended() {
	waited=0
	while :; do
		state=$(kubectl -n "$ns" get "$1" -o 'jsonpath={range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')
		case " $state " in
		*" Complete "*) echo Complete; return ;;
		*" Failed "*) echo Failed; return ;;
		esac
		if [ "$waited" -ge "$timeout" ]; then
			echo "merge.sh: $1 has not ended after ${timeout}s (TIMEOUT)" >&2
			return 1
		fi
		sleep "$poll"
		waited=$((waited + poll))
	done
}

shards=$(ended job/rollout-shards)
image=$(kubectl -n "$ns" get job/rollout-shards -o 'jsonpath={.spec.template.spec.containers[0].image}')
partial=
if [ "$shards" = Failed ]; then
	partial=1
	echo "merge.sh: job/rollout-shards failed: merging the finished shards with --partial" >&2
fi
kubectl -n "$ns" delete job/rollout-merge --ignore-not-found >&2
awk -v image="$image" -v partial="$partial" '
	/^ *image: rollout( |$)/ { match($0, /^ */); $0 = substr($0, 1, RLENGTH) "image: " image }
	{ print }
	partial != "" && /^ *- merge$/ { match($0, /^ */); print substr($0, 1, RLENGTH) "- --partial" }
' "$dir/merge-job.yaml" | kubectl -n "$ns" apply -f - >&2
merge=$(ended job/rollout-merge)
# The log is the merge's summary; without it (the pod gone, no kubelet answering) the exit
# status is still the merge's.
kubectl -n "$ns" logs job/rollout-merge || echo "merge.sh: no log of job/rollout-merge; the merged run is in /results/run/merged" >&2
[ "$merge" = Complete ]
