package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// Every pod template of deploy/kubernetes passes Pod Security "restricted" as the Kubernetes
// API server's own admission plugin checks it (k8s.io/pod-security-admission's checks, the
// latest version), runs without the service-account token, and every Job goes away after
// ttlSecondsAfterFinished.
func TestManifestsPodSecurityRestricted(t *testing.T) {
	m := readManifests(t)
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]corev1.PodTemplateSpec{}
	for name, d := range m.deployments {
		pods["Deployment/"+name] = d.Spec.Template
	}
	for name, s := range m.statefuls {
		pods["StatefulSet/"+name] = s.Spec.Template
	}
	for name, j := range m.jobs {
		pods["Job/"+name] = j.Spec.Template
		if j.Spec.TTLSecondsAfterFinished == nil {
			t.Errorf("Job %s: no ttlSecondsAfterFinished", name)
		}
	}
	if len(pods) < 5 {
		t.Fatalf("%d pod templates, want 5 or more", len(pods))
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for name, p := range pods {
		res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &p.ObjectMeta, &p.Spec))
		if !res.Allowed {
			t.Errorf("%s: Pod Security restricted: %s", name, strings.Join(res.ForbiddenReasons, "; "))
		}
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("%s: the service-account token is mounted (automountServiceAccountToken: false)", name)
		}
		for _, c := range p.Spec.Containers {
			if strings.HasSuffix(c.Image, ":latest") {
				t.Errorf("%s: container %s runs the mutable %s", name, c.Name, c.Image)
			}
		}
	}
	// The check has teeth: the pods as they were (no seccomp profile) are refused.
	p := m.statefuls["model-sim"].Spec.Template.DeepCopy()
	p.Spec.SecurityContext.SeccompProfile = nil
	if res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &p.ObjectMeta, &p.Spec)); res.Allowed {
		t.Error("a pod without a seccomp profile passes restricted")
	}
}

// podFailureAction is the Job controller's pod failure policy for a failed pod of the Job, as
// k8s.io/kubernetes v1.37.2 has it (pkg/controller/job/pod_failure_policy.go,
// matchPodFailurePolicy): the rules are tried in order and the first that matches decides; a
// rule has onExitCodes or onPodConditions, not both; onExitCodes matches a terminated
// container (of containerName when set) whose non-zero exit code is In (or NotIn) its values,
// onPodConditions a pod condition of its type and status (the API server defaults an unset
// status to True). No rule matching counts the failure; Ignore does not count it.
// internal/k8scheck (make k8s-check) runs the real controller on this Job.
func podFailureAction(job *batchv1.Job, container string, exitCode int32, conditions []corev1.PodConditionType) batchv1.PodFailurePolicyAction {
	for _, r := range job.Spec.PodFailurePolicy.Rules {
		if oe := r.OnExitCodes; oe != nil {
			if exitCode == 0 || (oe.ContainerName != nil && *oe.ContainerName != container) {
				continue
			}
			in := slices.Contains(oe.Values, exitCode)
			if (oe.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) == in {
				return r.Action
			}
			continue
		}
		for _, pc := range r.OnPodConditions {
			if slices.Contains(conditions, pc.Type) && (pc.Status == "" || pc.Status == corev1.ConditionTrue) {
				return r.Action
			}
		}
	}
	return batchv1.PodFailurePolicyActionCount
}

// indexOutcome plays one index of the Indexed Job with the Job controller's per-index rules
// (indexed_job_utils.go of the same version: isIndexFailed fails the index on FailIndex, or
// on a counted failure of a pod whose index-failure-count annotation, the index's counted
// failures before it, is backoffLimitPerIndex or more; getNewIndexFailureCounts counts an
// ignored failure apart): its pods exit with exits in turn; it returns whether the index
// succeeded and how many pods ran.
func indexOutcome(job *batchv1.Job, container string, exits []int32, conditions []corev1.PodConditionType) (succeeded bool, pods int) {
	failures := int32(0)
	for _, code := range exits {
		pods++
		if code == 0 {
			return true, pods
		}
		switch podFailureAction(job, container, code, conditions) {
		case batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyActionFailJob:
			return false, pods
		case batchv1.PodFailurePolicyActionIgnore:
			continue
		}
		failures++
		if failures > *job.Spec.BackoffLimitPerIndex {
			return false, pods
		}
	}
	return false, pods
}

// The shards' Job with the controller's rules: a transient failure (exit 5), a lost pod
// (exit 1, 137) and an eviction are retried; a bad config (2) and a model failure (4) fail
// their index at once; a bad minute of five transient exits in a row is survived when the
// fifth is not more than backoffLimitPerIndex failures.
func TestShardJobFailurePolicy(t *testing.T) {
	m := readManifests(t)
	job := m.jobs["rollout-shards"]
	if job.Spec.PodFailurePolicy == nil || job.Spec.BackoffLimitPerIndex == nil {
		t.Fatal("rollout-shards: no podFailurePolicy or backoffLimitPerIndex")
	}
	c := job.Spec.Template.Spec.Containers[0].Name
	limit := int(*job.Spec.BackoffLimitPerIndex)
	transient := func(n int) []int32 {
		exits := make([]int32, n)
		for i := range exits {
			exits[i] = exitTransient
		}
		return append(exits, exitOK)
	}
	for _, tc := range []struct {
		name       string
		exits      []int32
		conditions []corev1.PodConditionType
		succeeds   bool
	}{
		{"a transient failure, then success", []int32{exitTransient, exitOK}, nil, true},
		{"a bad minute: transient failures up to the limit", transient(limit), nil, true},
		{"transient failures past the limit", transient(limit + 1), nil, false},
		{"results not written, then success", []int32{exitFailure, exitOK}, nil, true},
		{"OOM-killed, then success", []int32{137, exitOK}, nil, true},
		{"interrupted, then success", []int32{exitInterrupted, exitOK}, nil, true},
		{"bad config", []int32{exitUsage, exitOK}, nil, false},
		{"model failures", []int32{exitFailures, exitOK}, nil, false},
		{"evicted many times", append(slices.Repeat([]int32{exitInterrupted}, limit+3), exitOK), []corev1.PodConditionType{corev1.DisruptionTarget}, true},
	} {
		if ok, pods := indexOutcome(job, c, tc.exits, tc.conditions); ok != tc.succeeds {
			t.Errorf("%s (exits %v): succeeded %v after %d pods, want %v", tc.name, tc.exits, ok, pods, tc.succeeds)
		}
	}
	if a := podFailureAction(job, c, exitTransient, nil); a != batchv1.PodFailurePolicyActionCount {
		t.Errorf("exit %d: action %s, want Count (retried)", exitTransient, a)
	}
	// A whole bad minute: the Job controller waits 10 s, 20 s, 40 s … between an index's
	// retries (backoff_utils.go, getRemainingTimePerIndex: DefaultJobPodFailureBackOff doubled
	// per earlier failure of the index); the retries must span at least two minutes.
	span := 0
	for i := range limit {
		span += 10 << i
	}
	if span < 120 {
		t.Errorf("backoffLimitPerIndex %d: the retries span %d s, want 2 minutes or more", limit, span)
	}
}

// merge.sh, with a kubectl that plays the cluster: it waits while the shards' Job runs, then
// applies the merge Job with the shards' image: after Complete a full merge, after Failed a
// --partial one; the applied Job decodes strictly and its args parse as rollout merge's. A Job
// that never ends makes it give up after TIMEOUT with a message.
func TestMergeScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	for _, tc := range []struct {
		shards, merge string
		partial       bool
		exit          int
	}{
		{"Complete", "Complete", false, 0},
		{"FailureTarget Failed", "Complete", true, 0},
		{"SuccessCriteriaMet Complete", "Failed", false, 1},
		{"", "", false, 1},
	} {
		t.Run(fmt.Sprintf("%q", tc.shards), func(t *testing.T) {
			dir := t.TempDir()
			fake := filepath.Join(dir, "kubectl")
			// The shards' Job is running for its first two polls, then in state shards.
			script := `#!/bin/sh
echo "$*" >> "$FAKE/calls"
case "$*" in
*"get job/rollout-shards"*conditions*)
	n=$(cat "$FAKE/polls" 2>/dev/null || echo 0); echo $((n + 1)) > "$FAKE/polls"
	if [ "$n" -ge 2 ]; then printf '%s ' $SHARDS; fi ;;
*"get job/rollout-shards"*image*) printf 'registry.example/rollout@sha256:0123' ;;
*"get job/rollout-merge"*conditions*) printf '%s ' $MERGE ;;
*"apply -f -"*) cat > "$FAKE/applied.yaml" ;;
*"logs job/rollout-merge"*) echo "merged summary" ;;
*delete*) ;;
*) echo "fake kubectl: unexpected $*" >&2; exit 3 ;;
esac
`
			if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", filepath.Join(deployDir, "merge.sh"))
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "FAKE="+dir, "SHARDS="+tc.shards, "MERGE="+tc.merge,
				"POLL=1", "TIMEOUT=3")
			out, err := cmd.CombinedOutput()
			code := cmd.ProcessState.ExitCode()
			if code != tc.exit {
				t.Fatalf("exit %d (%v), want %d:\n%s", code, err, tc.exit, out)
			}
			calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
			if tc.shards == "" {
				if !strings.Contains(string(out), "has not ended after 3s") || strings.Contains(string(calls), "apply") {
					t.Errorf("a Job that never ends: %s\ncalls:\n%s", out, calls)
				}
				return
			}
			if !strings.Contains(string(out), "merged summary") {
				t.Errorf("no merge log in the output:\n%s", out)
			}
			b, err := os.ReadFile(filepath.Join(dir, "applied.yaml"))
			if err != nil {
				t.Fatalf("nothing applied: %v\n%s", err, calls)
			}
			var job batchv1.Job
			if err := yaml.UnmarshalStrict(b, &job); err != nil {
				t.Fatalf("the applied merge Job: %v\n%s", err, b)
			}
			c := job.Spec.Template.Spec.Containers[0]
			if c.Image != "registry.example/rollout@sha256:0123" {
				t.Errorf("the merge runs %s, not the shards' image", c.Image)
			}
			if _, err := parseMerge(c.Args[1:], quiet()); err != nil || c.Args[0] != "merge" {
				t.Errorf("the merge's args %q: %v", c.Args, err)
			}
			if got := slices.Contains(c.Args, "--partial"); got != tc.partial {
				t.Errorf("after %s: --partial %v, want %v: %q", tc.shards, got, tc.partial, c.Args)
			}
			if polls := strings.Count(string(calls), "get job/rollout-shards -o jsonpath={range"); polls != 3 {
				t.Errorf("%d polls of the shards' Job, want 3 (two running, then ended):\n%s", polls, calls)
			}
		})
	}
}
