// Package k8scheck checks deploy/kubernetes against a real kube-apiserver (with an embedded
// etcd) and the real Job controller, both of the Kubernetes version in go.mod, in one test
// binary that build.sh builds and caches (`make k8s-check`):
//
//   - the kustomize output, as applied and with the optional parts (merge-job.yaml and every
//     other manifest the kustomization leaves out, and its Components), is created object by object with
//     dryRun=All and strict field validation, the way `kubectl apply --dry-run=server` sends
//     it; any refusal or warning (Pod Security "restricted" among them: namespace.yaml
//     labels the namespace) fails the check;
//   - the shards' Job, as kustomize renders it, is run by the Job controller
//     (k8s.io/kubernetes/pkg/controller/job) with the pods' exits set by hand, no kubelet:
//     a transient failure (exit 5) is retried, a model failure (exit 4) or a bad config
//     (exit 2) fails its index, an evicted pod is not counted; and merge.sh, with a real
//     kubectl built into this binary, starts the merge after a Complete and, with
//     --partial, after a Failed Job.
//
// Run it as `k8scheck.test -test.v -deploy DIR`.
package k8scheck

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.etcd.io/etcd/server/v3/embed"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	jobcontroller "k8s.io/kubernetes/pkg/controller/job"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var deployDir = flag.String("deploy", "", "the deploy/kubernetes directory to check")

// rollout's exit codes that the shards' pod failure policy tells apart.
const (
	exitUsage       = 2
	exitFailures    = 4
	exitTransient   = 5
	exitInterrupted = 130
)

// TestMain runs kubectl when this binary is called as kubectl (merge.sh's), the tests otherwise.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(cli.Run(kubectlcmd.NewDefaultKubectlCommand()))
	}
	os.Exit(m.Run())
}

func TestKubernetes(t *testing.T) {
	if *deployDir == "" {
		t.Fatal("no -deploy DIR (the deploy/kubernetes directory)")
	}
	start := time.Now()
	cfg := startAPIServer(t)
	t.Logf("kube-apiserver and etcd up in %.1fs", time.Since(start).Seconds())

	t.Run("DryRun", func(t *testing.T) { testDryRun(t, cfg) })
	t.Run("JobController", func(t *testing.T) { testJobController(t, cfg) })
}

// startAPIServer starts an embedded etcd and a kube-apiserver on loopback ports with the
// default admission plugins (Pod Security, ServiceAccount, NamespaceLifecycle, ...); both
// stop when t ends.
func startAPIServer(t *testing.T) *rest.Config {
	etcdCfg := testserver.NewTestConfig(t)
	testserver.RunEtcd(t, etcdCfg)
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL(etcdCfg)}
	srv := kubeapiservertesting.StartTestServerOrDie(t, nil, []string{"--endpoint-reconciler-type=none"}, storage)
	t.Cleanup(srv.TearDownFn)
	cfg := rest.CopyConfig(srv.ClientConfig)
	cfg.QPS, cfg.Burst = 1000, 1000
	return cfg
}

func etcdURL(cfg *embed.Config) string { return cfg.ListenClientUrls[0].String() }

// render copies the deploy directory to a temporary one, writes the secrets.env that is
// not in git, adds extra (file names of the directory) to the kustomization's resources and
// returns kustomize's output.
func render(t *testing.T, extra ...string) []*unstructured.Unstructured {
	return renderWith(t, extra, nil)
}

// renderWith is render with the kustomize Components (subdirectories of the deploy
// directory) added too.
func renderWith(t *testing.T, extra, components []string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(*deployDir)); err != nil {
		t.Fatal(err)
	}
	secrets := "redis-password=" + strings.Repeat("a", 64) + "\nsession-key=" + strings.Repeat("b", 64) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "secrets.env"), []byte(secrets), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(extra) > 0 || len(components) > 0 {
		k := kustomization(t, dir)
		k["resources"] = append(k["resources"].([]any), toAny(extra)...)
		if len(components) > 0 {
			old, _ := k["components"].([]any)
			k["components"] = append(old, toAny(components)...)
		}
		b, err := yaml.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", *deployDir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

func kustomization(t *testing.T, dir string) map[string]any {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	return k
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// optionalParts lists the manifests of the deploy directory that the kustomization does not
// apply (merge-job.yaml, podmonitor-example.yaml, ...).
func optionalParts(t *testing.T) []string {
	k := kustomization(t, *deployDir)
	var listed []string
	for _, r := range k["resources"].([]any) {
		listed = append(listed, r.(string))
	}
	files, err := filepath.Glob(filepath.Join(*deployDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		name := filepath.Base(f)
		if name != "kustomization.yaml" && !slices.Contains(listed, name) {
			out = append(out, name)
		}
	}
	return out
}

// components lists the kustomize Components of the deploy directory (its subdirectories whose
// kustomization.yaml is of kind Component, such as overshard/).
func components(t *testing.T) []string {
	entries, err := os.ReadDir(*deployDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(*deployDir, e.Name(), "kustomization.yaml")); err == nil &&
				kustomization(t, filepath.Join(*deployDir, e.Name()))["kind"] == "Component" {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// warnings collects the API server's Warning headers.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

// dryRunner creates objects the way `kubectl apply --dry-run=server --validate=strict` does
// for objects that do not exist yet: a create with dryRun=All and fieldValidation=Strict.
type dryRunner struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	warn   *warnings
}

func newDryRunner(t *testing.T, cfg *rest.Config) *dryRunner {
	cfg = rest.CopyConfig(cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	return &dryRunner{dyn: dyn, mapper: mapper, warn: w}
}

// apply creates obj (for real when dryRun is false) and returns the server's refusal or its
// warnings as one error.
func (d *dryRunner) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && gvk.Group == monitoringv1.SchemeGroupVersion.Group {
		return operatorKind(obj)
	}
	if err != nil {
		return fmt.Errorf("%s: the API server does not serve it: %v", name(obj), err)
	}
	var ri dynamic.ResourceInterface = d.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = d.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict, FieldManager: "kubectl-client-side-apply"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	d.warn.take()
	_, err = ri.Create(ctx, obj, opts)
	if w := d.warn.take(); len(w) > 0 {
		return fmt.Errorf("%s: warning: %s", name(obj), strings.Join(w, "; "))
	}
	if err != nil {
		return fmt.Errorf("%s: refused: %w", name(obj), err)
	}
	return nil
}

// operatorKind checks an object of the Prometheus Operator, whose CRDs this API server does
// not have, against the Operator's own Go types, strictly (an unknown field is an error).
func operatorKind(obj *unstructured.Unstructured) error {
	b, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	var into any
	switch obj.GetKind() {
	case monitoringv1.PodMonitorsKind:
		into = &monitoringv1.PodMonitor{}
	case monitoringv1.ServiceMonitorsKind:
		into = &monitoringv1.ServiceMonitor{}
	default:
		return fmt.Errorf("%s: no CRD and no Go type to check it against", name(obj))
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		return fmt.Errorf("%s: against the Prometheus Operator's types: %v", name(obj), err)
	}
	return nil
}

func name(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return obj.GetKind() + " " + ns + "/" + obj.GetName()
	}
	return obj.GetKind() + " " + obj.GetName()
}

// applyAll creates the Namespaces for real (a dry-run namespace would not exist for the
// objects in it, as with kubectl), then every other object with dryRun=All, and returns one
// error per refusal or warning.
func applyAll(t *testing.T, d *dryRunner, objs []*unstructured.Unstructured) []error {
	ctx := t.Context()
	var errs []error
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			continue
		}
		if err := d.apply(ctx, o, false); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, err)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		switch err := d.apply(ctx, o, true); {
		case err != nil:
			errs = append(errs, err)
		case o.GroupVersionKind().Group == monitoringv1.SchemeGroupVersion.Group:
			t.Logf("checked against the Prometheus Operator's Go types (its CRD is not installed here): %s", name(o))
		default:
			t.Logf("accepted: %s", name(o))
		}
	}
	return errs
}

func testDryRun(t *testing.T, cfg *rest.Config) {
	d := newDryRunner(t, cfg)
	optional := optionalParts(t)
	if !slices.Contains(optional, "merge-job.yaml") {
		t.Errorf("merge-job.yaml is not among the optional parts %v", optional)
	}
	comps := components(t)
	for _, tc := range []struct {
		name              string
		extra, components []string
	}{
		{"as applied", nil, nil},
		{"with " + strings.Join(append(slices.Clone(optional), comps...), ", "), optional, comps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			objs := renderWith(t, tc.extra, tc.components)
			if len(objs) < 8 {
				t.Fatalf("kustomize gave %d objects", len(objs))
			}
			for _, err := range applyAll(t, d, objs) {
				t.Error(err)
			}
			t.Logf("%d objects checked in %.1fs", len(objs), time.Since(start).Seconds())
		})
	}

	// The check has teeth: a pod template that Pod Security "restricted" warns about (no
	// seccomp profile), a misspelt field and a per-index failure action without
	// backoffLimitPerIndex are each reported.
	t.Run("refusals are reported", func(t *testing.T) {
		objs := render(t)
		var cases []*unstructured.Unstructured
		for _, o := range objs {
			switch o.GetKind() {
			case "StatefulSet", "Deployment":
				o = o.DeepCopy()
				unstructured.RemoveNestedField(o.Object, "spec", "template", "spec", "securityContext", "seccompProfile")
				cases = append(cases, o)
			case "Job":
				typo := o.DeepCopy()
				if err := unstructured.SetNestedField(typo.Object, int64(4), "spec", "backoffLimitPerIndx"); err != nil {
					t.Fatal(err)
				}
				noLimit := o.DeepCopy()
				unstructured.RemoveNestedField(noLimit.Object, "spec", "backoffLimitPerIndex")
				unstructured.RemoveNestedField(noLimit.Object, "spec", "maxFailedIndexes")
				cases = append(cases, typo, noLimit)
			}
		}
		if len(cases) < 3 {
			t.Fatalf("%d broken objects, want 3 or more", len(cases))
		}
		for _, o := range cases {
			if err := d.apply(t.Context(), o, true); err == nil {
				t.Errorf("%s broken: accepted without a warning", name(o))
			} else {
				t.Logf("reported as it should be: %v", err)
			}
		}
	})
}

// cluster is the Job controller at work on the API server, and what the tests need to drive
// its pods.
type cluster struct {
	cfg        *rest.Config
	cs         kubernetes.Interface
	kubeconfig string
	kubectlDir string
}

func testJobController(t *testing.T, cfg *rest.Config) {
	// The controller waits 10 s, 20 s, 40 s ... before an index's next pod; a tenth of a
	// second here so that the retries do not set the check's time.
	saved := jobcontroller.DefaultJobPodFailureBackOff
	jobcontroller.DefaultJobPodFailureBackOff = 100 * time.Millisecond
	t.Cleanup(func() { jobcontroller.DefaultJobPodFailureBackOff = saved })

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(cs, 0)
	jc, err := jobcontroller.NewController(ctx, cs, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go jc.Run(ctx, 2)

	c := &cluster{cfg: cfg, cs: cs}
	c.writeKubeconfig(t)

	shards := findJob(t, render(t), "rollout-shards")
	if shards.Spec.Completions == nil || *shards.Spec.Completions < 3 {
		t.Fatalf("rollout-shards: completions %v, want 3 or more", shards.Spec.Completions)
	}
	limit := int(*shards.Spec.BackoffLimitPerIndex)
	n := int(*shards.Spec.Completions)

	// Each case: the shards' Job in its own namespace, merge.sh started beside it, the
	// pods' exits per index, and what the Job and the merge end as.
	t.Run("transient failures are retried, then Complete, then the merge", func(t *testing.T) {
		ns := c.namespace(t, "complete")
		job := c.createJob(t, ns, shards)
		merge := c.startMerge(t, ns)
		// Index 0: a bad minute, limit transient failures in a row, then success.
		for i := range limit {
			p := c.activePod(t, job, 0)
			if got := p.Annotations[batchv1.JobIndexFailureCountAnnotation]; got != fmt.Sprint(i) {
				t.Errorf("index 0, pod %d: failure count %q, want %d", i, got, i)
			}
			c.finish(t, p, exitTransient, false)
		}
		// Index 1: an eviction (the pod drains and exits 130 with DisruptionTarget) is not
		// counted; a lost pod (137) is counted and retried.
		c.finish(t, c.activePod(t, job, 1), exitInterrupted, true)
		p := c.activePod(t, job, 1)
		if p.Annotations[batchv1.JobIndexFailureCountAnnotation] != "0" || p.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] != "1" {
			t.Errorf("after an eviction: annotations %v, want failure count 0, ignored 1", p.Annotations)
		}
		c.finish(t, p, 137, false)
		for ix := range n {
			c.finish(t, c.activePod(t, job, ix), 0, false)
		}
		j := c.waitFinished(t, job)
		if !isTrue(j, batchv1.JobComplete) || j.Status.Succeeded != int32(n) {
			t.Fatalf("the Job ended %s, succeeded %d, want Complete with %d", conditions(j), j.Status.Succeeded, n)
		}
		c.mergeRuns(t, ns, merge, job, false, 0)
	})

	t.Run("a model failure fails its index, the others finish, then Failed and a partial merge", func(t *testing.T) {
		ns := c.namespace(t, "failed-index")
		job := c.createJob(t, ns, shards)
		merge := c.startMerge(t, ns)
		c.finish(t, c.activePod(t, job, 1), exitFailures, false)
		c.waitJob(t, job, "index 1 failed", func(j *batchv1.Job) bool {
			return j.Status.FailedIndexes != nil && *j.Status.FailedIndexes == "1"
		})
		for ix := range n {
			if ix != 1 {
				c.finish(t, c.activePod(t, job, ix), 0, false)
			}
		}
		j := c.waitFinished(t, job)
		if !isTrue(j, batchv1.JobFailed) || reason(j, batchv1.JobFailed) != batchv1.JobReasonFailedIndexes {
			t.Fatalf("the Job ended %s, want Failed (FailedIndexes)", conditions(j))
		}
		if got := c.podsOfIndex(t, job, 1); got != 1 {
			t.Errorf("index 1 ran %d pods, want 1 (no retry after exit %d)", got, exitFailures)
		}
		c.mergeRuns(t, ns, merge, job, true, 0)
	})

	t.Run("two failed indexes fail the Job at once, a failed merge fails merge.sh", func(t *testing.T) {
		ns := c.namespace(t, "max-failed")
		job := c.createJob(t, ns, shards)
		merge := c.startMerge(t, ns)
		c.finish(t, c.activePod(t, job, 0), exitUsage, false)
		// Index 1: transient failures past backoffLimitPerIndex fail it too.
		for range limit + 1 {
			c.finish(t, c.activePod(t, job, 1), exitTransient, false)
		}
		j := c.waitFinished(t, job)
		if !isTrue(j, batchv1.JobFailed) || reason(j, batchv1.JobFailed) != batchv1.JobReasonMaxFailedIndexesExceeded {
			t.Fatalf("the Job ended %s, want Failed (MaxFailedIndexesExceeded)", conditions(j))
		}
		if got := c.podsOfIndex(t, job, 1); got != limit+1 {
			t.Errorf("index 1 ran %d pods, want %d (backoffLimitPerIndex %d retries)", got, limit+1, limit)
		}
		if j.Status.FailedIndexes == nil || *j.Status.FailedIndexes != "0,1" {
			t.Errorf("failed indexes %v, want 0,1", j.Status.FailedIndexes)
		}
		c.mergeRuns(t, ns, merge, job, true, exitUsage)
	})
}

func findJob(t *testing.T, objs []*unstructured.Unstructured, jobName string) *batchv1.Job {
	for _, o := range objs {
		if o.GetKind() == "Job" && o.GetName() == jobName {
			var j batchv1.Job
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &j, true); err != nil {
				t.Fatalf("Job %s: %v", jobName, err)
			}
			return &j
		}
	}
	t.Fatalf("no Job %s in the kustomize output", jobName)
	return nil
}

// namespace makes a namespace with the default ServiceAccount (no controller makes it here)
// and the Pod Security labels of namespace.yaml.
func (c *cluster) namespace(t *testing.T, name string) string {
	ctx := t.Context()
	var labels map[string]string
	for _, o := range render(t) {
		if o.GetKind() == "Namespace" {
			labels = o.GetLabels()
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.cs.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func (c *cluster) createJob(t *testing.T, ns string, tmpl *batchv1.Job) *batchv1.Job {
	j := tmpl.DeepCopy()
	j.Namespace = ns
	j, err := c.cs.BatchV1().Jobs(ns).Create(t.Context(), j, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the shards' Job: %v", err)
	}
	return j
}

// activePod waits for the pod of job's index ix that has not finished yet.
func (c *cluster) activePod(t *testing.T, job *batchv1.Job, ix int) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := c.pods(ctx, job, ix)
		if err != nil {
			return false, err
		}
		for i := range pods {
			p := &pods[i]
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		j, _ := c.cs.BatchV1().Jobs(job.Namespace).Get(t.Context(), job.Name, metav1.GetOptions{})
		t.Fatalf("no running pod for %s/%s index %d: %v (the Job: %s)", job.Namespace, job.Name, ix, err, conditions(j))
	}
	return found
}

func (c *cluster) pods(ctx context.Context, job *batchv1.Job, ix int) ([]corev1.Pod, error) {
	sel := batchv1.JobNameLabel + "=" + job.Name
	if ix >= 0 {
		sel += "," + batchv1.JobCompletionIndexAnnotation + "=" + fmt.Sprint(ix)
	}
	l, err := c.cs.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c *cluster) podsOfIndex(t *testing.T, job *batchv1.Job, ix int) int {
	pods, err := c.pods(t.Context(), job, ix)
	if err != nil {
		t.Fatal(err)
	}
	return len(pods)
}

// finish ends pod as a kubelet would report it: its container terminated with exit, the pod
// Succeeded (exit 0) or Failed, with the DisruptionTarget condition when evicted.
func (c *cluster) finish(t *testing.T, p *corev1.Pod, exit int32, evicted bool) {
	t.Helper()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodFailed
	if exit == 0 {
		p.Status.Phase = corev1.PodSucceeded
	}
	now := metav1.Now()
	for _, ctr := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:  ctr.Name,
			Image: ctr.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, StartedAt: now, FinishedAt: now}},
		})
	}
	if evicted {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: now,
		})
	}
	if _, err := c.cs.CoreV1().Pods(p.Namespace).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting pod %s's exit %d: %v", p.Name, exit, err)
	}
}

func (c *cluster) waitJob(t *testing.T, job *batchv1.Job, what string, done func(*batchv1.Job) bool) *batchv1.Job {
	t.Helper()
	var j *batchv1.Job
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		j, err = c.cs.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		return err == nil && done(j), err
	})
	if err != nil {
		t.Fatalf("%s/%s: waiting for %s: %v (the Job: %s)", job.Namespace, job.Name, what, err, conditions(j))
	}
	return j
}

func (c *cluster) waitFinished(t *testing.T, job *batchv1.Job) *batchv1.Job {
	t.Helper()
	j := c.waitJob(t, job, "Complete or Failed", func(j *batchv1.Job) bool {
		return isTrue(j, batchv1.JobComplete) || isTrue(j, batchv1.JobFailed)
	})
	var perIndex []string
	for ix := range int(*j.Spec.Completions) {
		pods, err := c.pods(t.Context(), j, ix)
		if err != nil {
			t.Fatal(err)
		}
		var exits []string
		for _, p := range pods {
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Terminated != nil {
					exits = append(exits, fmt.Sprint(s.State.Terminated.ExitCode))
				}
			}
		}
		perIndex = append(perIndex, fmt.Sprintf("%d: %d pods, exits [%s]", ix, len(pods), strings.Join(exits, " ")))
	}
	failed := ""
	if j.Status.FailedIndexes != nil {
		failed = *j.Status.FailedIndexes
	}
	t.Logf("%s/%s ended: %s, failed indexes %q; per index %s", j.Namespace, j.Name, conditions(j), failed, strings.Join(perIndex, "; "))
	return j
}

func isTrue(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func reason(j *batchv1.Job, typ batchv1.JobConditionType) string {
	for _, c := range j.Status.Conditions {
		if c.Type == typ {
			return c.Reason
		}
	}
	return ""
}

func conditions(j *batchv1.Job) string {
	if j == nil {
		return "(none)"
	}
	var s []string
	for _, c := range j.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("[%s] active %d succeeded %d failed %d", strings.Join(s, ", "), j.Status.Active, j.Status.Succeeded, j.Status.Failed)
}

// writeKubeconfig writes a kubeconfig for the API server and a kubectl (this binary) for
// merge.sh to find on its PATH.
func (c *cluster) writeKubeconfig(t *testing.T) {
	dir := t.TempDir()
	cfg := c.cfg
	kc := clientcmdapi.NewConfig()
	kc.Clusters["check"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	kc.AuthInfos["check"] = &clientcmdapi.AuthInfo{
		Token: cfg.BearerToken, ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile,
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
	}
	kc.Contexts["check"] = &clientcmdapi.Context{Cluster: "check", AuthInfo: "check"}
	kc.CurrentContext = "check"
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c.kubectlDir = filepath.Join(dir, "bin")
	if err := os.Mkdir(c.kubectlDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(c.kubectlDir, "kubectl")); err != nil {
		t.Fatal(err)
	}
}

type mergeScript struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

// startMerge starts merge.sh for namespace ns, polling every second.
func (c *cluster) startMerge(t *testing.T, ns string) *mergeScript {
	out := &bytes.Buffer{}
	cmd := exec.Command("sh", filepath.Join(*deployDir, "merge.sh"))
	cmd.Env = append(os.Environ(), "PATH="+c.kubectlDir+":"+os.Getenv("PATH"), "KUBECONFIG="+c.kubeconfig,
		"NAMESPACE="+ns, "POLL=1", "TIMEOUT=120")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mergeScript{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-m.done
		}
	})
	return m
}

// mergeRuns checks what merge.sh did once the shards' Job ended: it applied the merge Job
// with the shards' image (and --partial when they Failed); the merge's pod then exits with
// mergeExit, and merge.sh must exit 0 after a Complete merge, non-zero after a Failed one.
func (c *cluster) mergeRuns(t *testing.T, ns string, m *mergeScript, shards *batchv1.Job, partial bool, mergeExit int32) {
	t.Helper()
	var merge *batchv1.Job
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := c.cs.BatchV1().Jobs(ns).Get(ctx, "rollout-merge", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			select {
			case err := <-m.done:
				return false, fmt.Errorf("merge.sh ended (%v) before it started the merge", err)
			default:
				return false, nil
			}
		}
		merge = j
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("%v\nmerge.sh's output:\n%s", err, m.out)
	}
	ctr := merge.Spec.Template.Spec.Containers[0]
	if ctr.Image != shards.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("the merge runs %s, not the shards' image %s", ctr.Image, shards.Spec.Template.Spec.Containers[0].Image)
	}
	if got := slices.Contains(ctr.Args, "--partial"); got != partial || ctr.Args[0] != "merge" {
		t.Errorf("the merge's args %q: --partial %v, want %v", ctr.Args, got, partial)
	}
	c.finish(t, c.activePod(t, merge, -1), mergeExit, false)
	select {
	case err := <-m.done:
		code := m.cmd.ProcessState.ExitCode()
		if (code == 0) != (mergeExit == 0) {
			t.Errorf("merge.sh exited %d (%v) after a merge that exited %d:\n%s", code, err, mergeExit, m.out)
		} else {
			t.Logf("merge.sh started the merge with args %q and exited %d after it exited %d; its output:\n%s", ctr.Args, code, mergeExit, m.out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("merge.sh has not ended 2 minutes after the merge's pod did:\n%s", m.out)
	}
}
