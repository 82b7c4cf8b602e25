package main

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/rollout-dev/rollout/pkg/runner"
)

// component is the part of kustomize's Component the overshard option uses, decoded strictly.
type component struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Patches    []struct {
		Target struct {
			Group   string `json:"group"`
			Version string `json:"version"`
			Kind    string `json:"kind"`
			Name    string `json:"name"`
		} `json:"target"`
		Path string `json:"path"`
	} `json:"patches"`
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// applyJSONPatch applies the test and replace operations of ops to doc as RFC 6902 says: a
// test whose value differs, or a path that is not there, fails the whole patch.
func applyJSONPatch(t *testing.T, doc any, ops []jsonPatchOp) {
	t.Helper()
	for _, op := range ops {
		parts := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		parent := doc
		for _, p := range parts[:len(parts)-1] {
			parent = jsonChild(t, parent, p, op.Path)
		}
		last := parts[len(parts)-1]
		switch op.Op {
		case "test":
			if got := jsonChild(t, parent, last, op.Path); got != op.Value {
				t.Fatalf("JSON patch: test %s: the value is %v, not %v (the args moved: fix the patch's indexes)", op.Path, got, op.Value)
			}
		case "replace":
			jsonChild(t, parent, last, op.Path)
			switch p := parent.(type) {
			case map[string]any:
				p[last] = op.Value
			case []any:
				i, _ := strconv.Atoi(last)
				p[i] = op.Value
			}
		default:
			t.Fatalf("JSON patch: op %q: this test knows test and replace", op.Op)
		}
	}
}

// jsonChild is member or index key of v; the test fails when there is none.
func jsonChild(t *testing.T, v any, key, where string) any {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		if c, ok := x[key]; ok {
			return c
		}
	case []any:
		if i, err := strconv.Atoi(key); err == nil && i >= 0 && i < len(x) {
			return x[i]
		}
	}
	t.Fatalf("JSON patch: %s: no %q there", where, key)
	return nil
}

// The overshard component patches the shards' Job so that each of its pods runs rollout run
// --shard claim/M with --out the run's directory: rollout's own parser reads the patched args,
// M is more than the pods, every shard's directory is one the merge Job's glob reads, and the
// pod template still passes Pod Security restricted.
func TestKubernetesOvershardComponent(t *testing.T) {
	m := readManifests(t)
	img := readDockerfile(t)
	dir := filepath.Join(deployDir, "overshard")
	var c component
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	strict(t, "overshard/kustomization.yaml", b, &c)
	if c.Kind != "Component" || c.APIVersion != "kustomize.config.k8s.io/v1alpha1" || len(c.Patches) != 1 {
		t.Fatalf("overshard/kustomization.yaml: %+v: want one patch of a kustomize Component", c)
	}
	p := c.Patches[0]
	job := m.jobs[p.Target.Name]
	if job == nil || p.Target.Kind != "Job" || p.Target.Group+"/"+p.Target.Version != "batch/v1" {
		t.Fatalf("overshard: the patch's target %+v is not a Job of the manifests", p.Target)
	}
	pb, err := os.ReadFile(filepath.Join(dir, p.Path))
	if err != nil {
		t.Fatal(err)
	}
	var ops []jsonPatchOp
	if err := yaml.UnmarshalStrict(pb, &ops); err != nil {
		t.Fatalf("overshard/%s: %v", p.Path, err)
	}
	jb, _ := json.Marshal(job)
	var doc any
	json.Unmarshal(jb, &doc)
	applyJSONPatch(t, doc, ops)
	jb, _ = json.Marshal(doc)
	var patched batchv1.Job
	if err := json.Unmarshal(jb, &patched); err != nil {
		t.Fatal(err)
	}

	cont := patched.Spec.Template.Spec.Containers[0]
	pods := int(*patched.Spec.Parallelism)
	var args []string
	for _, a := range cont.Args[1:] {
		args = append(args, localPath(img, strings.ReplaceAll(a, "$("+runner.ShardIndexEnv+")", "0")))
	}
	e := quiet()
	e.getenv = func(k string) string {
		if k == runner.ShardIndexEnv {
			return "0"
		}
		return ""
	}
	f, _, _, _, err := parseRunFlags(args, e)
	if err != nil {
		t.Fatalf("rollout run %q: %v", args, err)
	}
	if f.claims <= pods || f.claimStore != "" {
		t.Errorf("overshard: --shard claim/%d over %d pods (claims in %q): want more shards than pods, the claims on the volume", f.claims, pods, f.claimStore)
	}
	mount := cont.VolumeMounts[0].MountPath
	mj := m.jobs["rollout-merge"].Spec.Template.Spec.Containers[0]
	glob := mj.Args[slices.Index(mj.Args, "--out")+2]
	for i := range f.claims {
		d := shardDir(f.out, i)
		if ok, _ := path.Match(glob, d); !ok || !strings.HasPrefix(d, mount+"/") {
			t.Errorf("overshard: shard %d's directory %s is not on the volume at %s, or not matched by the merge's %s", i, d, mount, glob)
		}
	}
	if ok, _ := path.Match(glob, claimsDir(f.out)); ok {
		t.Errorf("overshard: the merge's %s matches the claims directory %s", glob, claimsDir(f.out))
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	tmpl := patched.Spec.Template
	if res := policy.AggregateCheckResults(eval.EvaluatePod(lv, &tmpl.ObjectMeta, &tmpl.Spec)); !res.Allowed {
		t.Errorf("overshard: Pod Security restricted: %s", strings.Join(res.ForbiddenReasons, "; "))
	}
}
