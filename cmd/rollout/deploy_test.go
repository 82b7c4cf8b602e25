package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/rollout-dev/rollout/pkg/metrics"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/sim"
)

// The manifests of deploy/kubernetes/ and the Dockerfile, checked against the Kubernetes API
// types and against rollout itself: every document decodes strictly (an unknown or misspelt
// field is an error) into k8s.io/api's types; every container's args parse with rollout's own
// flag parsers; ports, Service selectors, probe paths and metrics annotations match what the
// binary serves; the Indexed Job gives each pod its shard through --shard auto/N.

const deployDir = "../../deploy/kubernetes"

// kustomization is the part of kustomize's Kustomization the manifests use, decoded strictly.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeTemplates bool              `json:"includeTemplates"`
	} `json:"labels"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
	SecretGenerator []struct {
		Name string   `json:"name"`
		Envs []string `json:"envs"`
	} `json:"secretGenerator"`
}

// podMonitor is the part of the Prometheus Operator's PodMonitor the example uses.
type podMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// manifests are the decoded objects of deploy/kubernetes, by kind.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	statefuls   map[string]*appsv1.StatefulSet
	services    map[string]*corev1.Service
	jobs        map[string]*batchv1.Job
	pvcs        map[string]*corev1.PersistentVolumeClaim
	netpols     map[string]*networkingv1.NetworkPolicy
	monitors    []*podMonitor
	files       map[string][]string // file → "Kind/name" of its objects
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// strict decodes a YAML document into v, refusing unknown and duplicate fields.
func strict(t *testing.T, where string, doc []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func readManifests(t *testing.T) manifests {
	t.Helper()
	m := manifests{deployments: map[string]*appsv1.Deployment{}, statefuls: map[string]*appsv1.StatefulSet{}, services: map[string]*corev1.Service{}, jobs: map[string]*batchv1.Job{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{}, netpols: map[string]*networkingv1.NetworkPolicy{}, files: map[string][]string{}}
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	for _, file := range files {
		base := filepath.Base(file)
		if base == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			where := fmt.Sprintf("%s, document %d", base, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if tm.Kind == "" {
				continue // comments only
			}
			var name string
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				var o corev1.Namespace
				strict(t, where, []byte(doc), &o)
				name = o.Name
			case "v1 PersistentVolumeClaim":
				o := new(corev1.PersistentVolumeClaim)
				strict(t, where, []byte(doc), o)
				name, m.pvcs[o.Name] = o.Name, o
			case "v1 Service":
				o := new(corev1.Service)
				strict(t, where, []byte(doc), o)
				name, m.services[o.Name] = o.Name, o
			case "apps/v1 Deployment":
				o := new(appsv1.Deployment)
				strict(t, where, []byte(doc), o)
				name, m.deployments[o.Name] = o.Name, o
			case "apps/v1 StatefulSet":
				o := new(appsv1.StatefulSet)
				strict(t, where, []byte(doc), o)
				name, m.statefuls[o.Name] = o.Name, o
			case "batch/v1 Job":
				o := new(batchv1.Job)
				strict(t, where, []byte(doc), o)
				name, m.jobs[o.Name] = o.Name, o
			case "networking.k8s.io/v1 NetworkPolicy":
				o := new(networkingv1.NetworkPolicy)
				strict(t, where, []byte(doc), o)
				name, m.netpols[o.Name] = o.Name, o
			case "monitoring.coreos.com/v1 PodMonitor":
				o := new(podMonitor)
				strict(t, where, []byte(doc), o)
				name, m.monitors = o.Name, append(m.monitors, o)
			default:
				t.Fatalf("%s: %s %s: not a kind this test knows", where, tm.APIVersion, tm.Kind)
			}
			if name == "" {
				t.Fatalf("%s: %s without a name", where, tm.Kind)
			}
			m.files[base] = append(m.files[base], tm.Kind+"/"+name)
		}
	}
	return m
}

// A misspelt field is refused: the strict decoding has teeth.
func TestManifestDecodingIsStrict(t *testing.T) {
	doc := []byte("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: x\nspec:\n  backoffLimitPerIndx: 3\n")
	if err := yaml.UnmarshalStrict(doc, new(batchv1.Job)); err == nil || !strings.Contains(err.Error(), "backoffLimitPerIndx") {
		t.Errorf("a misspelt field: %v", err)
	}
}

// dockerImage is what the Dockerfile says about the image: its stages, the final stage's base,
// user and entrypoint, and where it copies the data directory.
type dockerImage struct {
	stages             []string // the FROM lines
	final, user        string
	cgoOff             bool
	entrypoint         []string
	binary, dataTarget string
}

func readDockerfile(t *testing.T) dockerImage {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var img dockerImage
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			img.stages = append(img.stages, line)
			img.final, img.user = f[1], "" // USER is per stage
		case "USER":
			img.user = f[1]
		case "ENV", "ARG":
			if slices.Contains(f[1:], "CGO_ENABLED=0") {
				img.cgoOff = true
			}
		case "RUN":
			if strings.Contains(line, "CGO_ENABLED=0 ") {
				img.cgoOff = true
			}
		case "COPY":
			if len(f) == 4 && strings.HasPrefix(f[1], "--from=") {
				img.binary = f[3]
			}
			if len(f) == 3 && strings.TrimSuffix(f[1], "/") == "data" {
				img.dataTarget = strings.TrimSuffix(f[2], "/")
			}
		case "ENTRYPOINT":
			var ep []string
			if err := yaml.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, f[0]))), &ep); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec form (a JSON array; the image has no shell): %s", line)
			}
			img.entrypoint = ep
		}
	}
	return img
}

// The Dockerfile builds a static binary in one stage and runs it, as a user that is not root,
// from a base without a shell.
func TestDockerfile(t *testing.T) {
	img := readDockerfile(t)
	if len(img.stages) < 2 || !strings.Contains(img.stages[0], " AS ") {
		t.Errorf("want a multi-stage build (a named build stage, then the image): %q", img.stages)
	}
	if !strings.HasPrefix(img.final, "gcr.io/distroless/static") && img.final != "scratch" {
		t.Errorf("the image is based on %s: want distroless/static or scratch (a static binary needs no libc and no shell)", img.final)
	}
	if !img.cgoOff {
		t.Error("CGO_ENABLED=0 is not set for the build: the binary would need libc")
	}
	uid, _, _ := strings.Cut(img.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric user that is not root (Kubernetes' runAsNonRoot checks it by number)", img.user)
	}
	if len(img.entrypoint) != 1 || img.entrypoint[0] != img.binary || img.binary == "" {
		t.Errorf("ENTRYPOINT %q, binary copied to %q: the entrypoint must be the binary alone (Kubernetes args are rollout's)", img.entrypoint, img.binary)
	}
	if img.dataTarget == "" {
		t.Error("the Dockerfile does not copy data/ into the image (the manifests read its task files)")
	}
}

// localPath maps a path in the image to the repository's file (COPY data/ DEST).
func localPath(img dockerImage, p string) string {
	if rest, ok := strings.CutPrefix(p, img.dataTarget+"/"); ok {
		return "../../data/" + rest
	}
	return p
}

// portOf is the port number of --addr-like ADDR (host:port).
func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("%q: not HOST:PORT", addr)
	}
	return int32(n)
}

// containerPort is the port named name of c.
func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, name)
	return 0
}

// probe checks that a probe's httpGet asks h for a path it answers with 200, on the
// container's port the server listens on.
func probe(t *testing.T, what string, p *corev1.Probe, c corev1.Container, port int32, h http.Handler) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Fatalf("%s: no httpGet probe", what)
	}
	if got := containerPort(t, c, p.HTTPGet.Port.String()); got != port {
		t.Errorf("%s: probe port %s is %d, the server listens on %d", what, p.HTTPGet.Port.String(), got, port)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", p.HTTPGet.Path, nil))
	if rec.Code != 200 {
		t.Errorf("%s: GET %s answers %d, want 200: %s", what, p.HTTPGet.Path, rec.Code, rec.Body)
	}
}

// metricsAnnotations checks that the pod's prometheus.io annotations point at the port the
// container serves --metrics-addr on, named metrics (for a PodMonitor), and at metrics.Path.
func metricsAnnotations(t *testing.T, what string, tmpl corev1.PodTemplateSpec, c corev1.Container, addr string) {
	t.Helper()
	a := tmpl.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != metrics.Path {
		t.Errorf("%s: annotations %v: want prometheus.io/scrape true and path %s", what, a, metrics.Path)
	}
	if addr == "" {
		t.Fatalf("%s: no --metrics-addr", what)
	}
	port := portOf(t, addr)
	if a["prometheus.io/port"] != strconv.Itoa(int(port)) || containerPort(t, c, "metrics") != port {
		t.Errorf("%s: metrics served on %d; annotation port %q", what, port, a["prometheus.io/port"])
	}
}

// serviceFor checks that Service name selects exactly the pods of one workload, whose
// container has the Service's target port, and returns its port number.
func serviceFor(t *testing.T, m manifests, name string) (port int32, pods corev1.PodTemplateSpec) {
	t.Helper()
	svc := m.services[name]
	if svc == nil {
		t.Fatalf("no Service %q", name)
	}
	var matched []string
	workloads := map[string]struct {
		sel  *metav1.LabelSelector
		pods corev1.PodTemplateSpec
	}{}
	for dn, d := range m.deployments {
		workloads["Deployment "+dn] = struct {
			sel  *metav1.LabelSelector
			pods corev1.PodTemplateSpec
		}{d.Spec.Selector, d.Spec.Template}
	}
	for sn, s := range m.statefuls {
		workloads["StatefulSet "+sn] = struct {
			sel  *metav1.LabelSelector
			pods corev1.PodTemplateSpec
		}{s.Spec.Selector, s.Spec.Template}
	}
	for dn, d := range workloads {
		sel, err := metav1.LabelSelectorAsSelector(d.sel)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(d.pods.Labels)) {
			t.Errorf("%s: its selector does not select its own pods", dn)
		}
		all := true
		for k, v := range svc.Spec.Selector {
			all = all && d.pods.Labels[k] == v
		}
		if all && len(svc.Spec.Selector) > 0 {
			matched = append(matched, dn)
			pods = d.pods
		}
	}
	if len(matched) != 1 || len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service %s selects %v (want one Deployment), with %d ports", name, matched, len(svc.Spec.Ports))
	}
	sp := svc.Spec.Ports[0]
	c := pods.Spec.Containers[0]
	if got := containerPort(t, c, sp.TargetPort.String()); got == 0 {
		t.Errorf("Service %s: target port %s not in %s", name, sp.TargetPort.String(), c.Name)
	}
	return sp.Port, pods
}

// serviceURL checks that a URL names Service host:port of the manifests.
func serviceURL(t *testing.T, m manifests, what, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s %s: %v", what, raw, err)
	}
	host := u.Hostname()
	// POD.SERVICE: a replica of a StatefulSet by its own name, through its headless Service.
	if pod, svc, ok := strings.Cut(host, "."); ok {
		s := m.statefuls[strings.TrimRight(strings.TrimRightFunc(pod, func(r rune) bool { return r >= '0' && r <= '9' }), "-")]
		ord, err := strconv.Atoi(pod[strings.LastIndex(pod, "-")+1:])
		if s == nil || err != nil || s.Spec.ServiceName != svc || s.Spec.Replicas == nil || ord >= int(*s.Spec.Replicas) {
			t.Fatalf("%s %s: %s is not a replica of a StatefulSet served by %s", what, raw, pod, svc)
		}
		if m.services[svc] == nil || m.services[svc].Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s %s: Service %s is not headless", what, raw, svc)
		}
		host = svc
	}
	port, _ := serviceFor(t, m, host)
	if strconv.Itoa(int(port)) != u.Port() {
		t.Errorf("%s %s: Service %s listens on %d", what, raw, u.Hostname(), port)
	}
}

func quiet() env {
	return env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
}

func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	img := readDockerfile(t)

	// The kustomization lists every manifest but the two applied apart.
	var k kustomization
	kb, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	strict(t, "kustomization.yaml", kb, &k)
	var listed []string
	for f := range m.files {
		if f != "merge-job.yaml" && f != "podmonitor-example.yaml" {
			listed = append(listed, f)
		}
	}
	slices.Sort(listed)
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, listed) || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml lists %v; the manifests are %v", got, listed)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "rollout" {
		t.Fatalf("kustomization.yaml images: %+v", k.Images)
	}
	if im := k.Images[0]; im.NewTag == "latest" || (im.NewTag == "" && im.Digest == "") {
		t.Errorf("kustomization.yaml: image %+v: want a tag other than latest, or a digest", im)
	}
	// Redis's password and the cookie key come from a generated Secret, of a file not in git.
	if len(k.SecretGenerator) != 1 || k.SecretGenerator[0].Name != secretName || len(k.SecretGenerator[0].Envs) != 1 {
		t.Fatalf("kustomization.yaml secretGenerator: %+v, want %s", k.SecretGenerator, secretName)
	}

	// The resource server: rollout serve's own parser reads its args; its readiness and
	// liveness probes ask the server for a path it answers; its Service reaches its port; its
	// sessions are in the Redis Service.
	rs := m.deployments["resource-server"]
	if rs == nil || rs.Spec.Replicas == nil || *rs.Spec.Replicas < 2 {
		t.Fatalf("the resource server: want a Deployment of several replicas")
	}
	c := rs.Spec.Template.Spec.Containers[0]
	if c.Image != "rollout" || len(c.Command) > 0 || c.Args[0] != "serve" {
		t.Fatalf("resource server: image %q, command %q, args %q: want the image's entrypoint with args serve ...", c.Image, c.Command, c.Args)
	}
	// What the kubelet does: $(REDIS_PASSWORD) is the Secret's value, the key file is the
	// Secret's item mounted.
	serveArgs := kubeletArgs(t, c, rs.Spec.Template.Spec, map[string]string{"redis-password": "pw", "session-key": strings.Repeat("k", 64)})
	sa, err := parseServe(serveArgs[1:], quiet())
	if err != nil {
		t.Fatalf("resource server args %q: %v", serveArgs, err)
	}
	if !slices.Contains(c.Args, "--session-key-file") || len(sa.key) < 32 {
		t.Errorf("resource server: want --session-key-file from the Secret, not a key kept in Redis: %q", c.Args)
	}
	if u, err := url.Parse(sa.storeURL); err != nil || u.User == nil {
		t.Errorf("resource server: --session-store %s without the Redis password", sa.storeURL)
	} else if pw, _ := u.User.Password(); pw != "pw" {
		t.Errorf("resource server: --session-store %s: the password is not the Secret's", sa.storeURL)
	}
	srvPort := portOf(t, sa.addr)
	if containerPort(t, c, "http") != srvPort {
		t.Errorf("resource server listens on %d (--addr %s), its http port is %d", srvPort, sa.addr, containerPort(t, c, "http"))
	}
	h, err := newBuiltin(context.Background(), sa.name, "memory", sa.ttl, sa.key)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	probe(t, "resource server readiness", c.ReadinessProbe, c, srvPort, h)
	probe(t, "resource server liveness", c.LivenessProbe, c, srvPort, h)
	metricsAnnotations(t, "resource server", rs.Spec.Template, c, sa.metricsAddr)
	if !strings.HasPrefix(sa.storeURL, "redis://") {
		t.Errorf("resource server replicas must share sessions: --session-store %s", sa.storeURL)
	}
	serviceURL(t, m, "--session-store", sa.storeURL)
	if port, _ := serviceFor(t, m, "resource-server"); port == 0 {
		t.Error("resource-server Service without a port")
	}
	redisPod := m.deployments["redis"].Spec.Template
	redis := redisPod.Spec.Containers[0]
	if redis.ReadinessProbe == nil || redis.ReadinessProbe.Exec == nil {
		t.Error("redis: want a readiness probe")
	}
	ra := kubeletArgs(t, redis, redisPod.Spec, map[string]string{"redis-password": "pw"})
	if i := slices.Index(ra, "--requirepass"); i < 0 || i+1 >= len(ra) || ra[i+1] != "pw" {
		t.Errorf("redis: want --requirepass with the Secret's password: %q", redis.Args)
	}
	authed := false
	for _, ev := range redis.Env {
		authed = authed || (ev.Name == "REDISCLI_AUTH" && ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil)
	}
	if !authed {
		t.Error("redis: the readiness probe's redis-cli needs REDISCLI_AUTH")
	}
	// Only the resource server's pods reach Redis.
	np := m.netpols["redis"]
	if np == nil {
		t.Fatal("no NetworkPolicy for redis")
	}
	if sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); !sel.Matches(labels.Set(redisPod.Labels)) || len(np.Spec.Ingress) != 1 {
		t.Errorf("NetworkPolicy redis: does not select the Redis pods with one ingress rule: %+v", np.Spec)
	} else {
		for _, peer := range np.Spec.Ingress[0].From {
			sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			if err != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels) == 0 || peer.NamespaceSelector != nil || peer.IPBlock != nil {
				t.Errorf("NetworkPolicy redis: a peer other than pods of this namespace: %+v", peer)
				continue
			}
			for name, d := range m.deployments {
				if sel.Matches(labels.Set(d.Spec.Template.Labels)) != (name == "resource-server") {
					t.Errorf("NetworkPolicy redis: %s's pods: allowed %v", name, sel.Matches(labels.Set(d.Spec.Template.Labels)))
				}
			}
			for name, s := range m.statefuls {
				if sel.Matches(labels.Set(s.Spec.Template.Labels)) {
					t.Errorf("NetworkPolicy redis: StatefulSet %s's pods may reach Redis", name)
				}
			}
			for name, j := range m.jobs {
				if sel.Matches(labels.Set(j.Spec.Template.Labels)) {
					t.Errorf("NetworkPolicy redis: Job %s's pods may reach Redis", name)
				}
			}
		}
	}

	// The simulator, standing in for the model: rollout sim's parser reads its args, and its
	// readiness probe asks it for its model list.
	ms := m.statefuls["model-sim"]
	if ms == nil || ms.Spec.Replicas == nil || *ms.Spec.Replicas < 2 {
		t.Fatal("model-sim: want a StatefulSet of several replicas, each its own endpoint")
	}
	c = ms.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "sim" {
		t.Fatalf("model-sim args %q", c.Args)
	}
	args := slices.Clone(c.Args[1:])
	for i := range args {
		args[i] = localPath(img, args[i])
	}
	sm, err := parseSim(args, quiet())
	if err != nil {
		t.Fatalf("model-sim args %q: %v", c.Args, err)
	}
	ts, err := sim.LoadTasks(sm.tasks...)
	if err != nil {
		t.Fatal(err)
	}
	simulator, err := sim.New(ts, sm.opts)
	if err != nil {
		t.Fatal(err)
	}
	probe(t, "model-sim readiness", c.ReadinessProbe, c, portOf(t, sm.addr), simulator)
	serviceFor(t, m, "model-sim")

	// The Indexed Job: N pods, each rollout run --shard auto/N with its index from
	// JOB_COMPLETION_INDEX, retried per index, a bad config not retried.
	job := m.jobs["rollout-shards"]
	if job == nil {
		t.Fatal("no Job rollout-shards")
	}
	js := job.Spec
	if js.CompletionMode == nil || *js.CompletionMode != batchv1.IndexedCompletion || js.Completions == nil || js.Parallelism == nil {
		t.Fatalf("rollout-shards: want completionMode Indexed, completions and parallelism")
	}
	n := int(*js.Completions)
	if js.BackoffLimitPerIndex == nil || *js.BackoffLimitPerIndex < 1 {
		t.Error("rollout-shards: want backoffLimitPerIndex: a failed shard is retried on its own")
	}
	if js.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Error("rollout-shards: a podFailurePolicy needs restartPolicy Never")
	}
	c = js.Template.Spec.Containers[0]
	failIndex := map[int32]bool{}
	if js.PodFailurePolicy != nil {
		for _, r := range js.PodFailurePolicy.Rules {
			if r.Action == batchv1.PodFailurePolicyActionFailIndex && r.OnExitCodes != nil && *r.OnExitCodes.ContainerName == c.Name &&
				r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn {
				for _, v := range r.OnExitCodes.Values {
					failIndex[v] = true
				}
			}
		}
	}
	if !failIndex[exitUsage] {
		t.Errorf("rollout-shards: exit code %d (bad flags, config or input) is retried: want a FailIndex rule", exitUsage)
	}
	if failIndex[exitFailure] || failIndex[exitInterrupted] {
		t.Errorf("rollout-shards: exit codes %d and %d (results not written, interrupted) must be retried: %v", exitFailure, exitInterrupted, failIndex)
	}
	declared := false
	for _, ev := range c.Env {
		if ev.Name == runner.ShardIndexEnv && ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil &&
			ev.ValueFrom.FieldRef.FieldPath == "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
			declared = true
		}
	}
	if !declared {
		t.Errorf("rollout-shards: %s is not declared from the job-completion-index annotation (the args refer to it)", runner.ShardIndexEnv)
	}
	if c.Args[0] != "run" || !slices.Contains(c.Args, "auto/"+strconv.Itoa(n)) {
		t.Fatalf("rollout-shards args %q: want run ... --shard auto/%d", c.Args, n)
	}
	var outs []string
	mount := c.VolumeMounts[0].MountPath
	for i := range n {
		// What the kubelet does: $(JOB_COMPLETION_INDEX) in args is the variable's value.
		idx := strconv.Itoa(i)
		args := slices.Clone(c.Args[1:])
		for j := range args {
			args[j] = localPath(img, strings.ReplaceAll(args[j], "$("+runner.ShardIndexEnv+")", idx))
		}
		e := quiet()
		e.getenv = func(k string) string {
			if k == runner.ShardIndexEnv {
				return idx
			}
			return ""
		}
		f, _, _, _, err := parseRunFlags(args, e)
		if err != nil {
			t.Fatalf("pod %d: rollout run %q: %v", i, args, err)
		}
		if f.shard != (runner.Shard{Index: i, Count: n}) || !f.resumeAuto {
			t.Errorf("pod %d: shard %v, --resume=auto %v", i, f.shard, f.resumeAuto)
		}
		if !strings.HasPrefix(f.out, mount+"/") {
			t.Errorf("pod %d: --out %s is not on the volume at %s", i, f.out, mount)
		}
		outs = append(outs, f.out)
		urls := strings.Split(f.modelURL, ",")
		if len(urls) != int(*ms.Spec.Replicas) {
			t.Errorf("pod %d: %d --model-url for %d model replicas: want one each, for rollout's routing", i, len(urls), *ms.Spec.Replicas)
		}
		for _, u := range urls {
			serviceURL(t, m, "--model-url", u)
		}
		for _, s := range f.servers {
			serviceURL(t, m, "--server", serverURL(s))
		}
		if i == 0 {
			metricsAnnotations(t, "rollout-shards", js.Template, c, f.metricsAddr)
			// An evicted pod drains its rollouts, then writes its files, before it is killed.
			if g := js.Template.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= f.drainTimeout.Seconds() {
				t.Errorf("rollout-shards: terminationGracePeriodSeconds %v is not longer than --drain-timeout %s", g, f.drainTimeout)
			}
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(outs)))) != n {
		t.Errorf("the shards' --out are not one per pod: %v", outs)
	}
	claim := js.Template.Spec.Volumes[0].PersistentVolumeClaim
	if claim == nil || m.pvcs[claim.ClaimName] == nil || !slices.Contains(m.pvcs[claim.ClaimName].Spec.AccessModes, corev1.ReadWriteMany) {
		t.Errorf("rollout-shards: the results volume must be a ReadWriteMany claim of the manifests")
	}

	// The merge Job: rollout merge's parser reads its args, and its glob matches every shard's
	// directory and nothing else.
	mj := m.jobs["rollout-merge"]
	if mj == nil {
		t.Fatal("no Job rollout-merge")
	}
	c = mj.Spec.Template.Spec.Containers[0]
	if c.Image != "rollout" {
		t.Errorf("rollout-merge runs %s: want rollout, which merge.sh replaces with the shards' image", c.Image)
	}
	ma, err := parseMerge(c.Args[1:], quiet())
	if err != nil || c.Args[0] != "merge" {
		t.Fatalf("rollout-merge args %q: %v", c.Args, err)
	}
	for _, p := range ma.paths {
		for _, o := range outs {
			if ok, _ := path.Match(p, o); !ok && strings.ContainsAny(p, "*?[") {
				t.Errorf("the merge's %s does not match shard directory %s", p, o)
			}
		}
		if ok, _ := path.Match(p, ma.out); ok {
			t.Errorf("the merge's %s matches its own --out %s", p, ma.out)
		}
	}
	if mj.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != claim.ClaimName {
		t.Error("rollout-merge does not read the shards' volume")
	}

	// The PodMonitor scrapes the pods' metrics port at metrics.Path.
	if len(m.monitors) != 1 || m.monitors[0].Spec.PodMetricsEndpoints[0].Port != "metrics" || m.monitors[0].Spec.PodMetricsEndpoints[0].Path != metrics.Path {
		t.Errorf("podmonitor-example.yaml: %+v", m.monitors)
	}
	// It selects by the label the kustomization puts on every pod template (and the merge Job
	// has itself).
	for key, v := range m.monitors[0].Spec.Selector.MatchLabels {
		if len(k.Labels) != 1 || k.Labels[0].Pairs[key] != v || !k.Labels[0].IncludeTemplates {
			t.Errorf("the PodMonitor selects %s=%s; the kustomization labels pod templates with %+v", key, v, k.Labels)
		}
		if mj.Spec.Template.Labels[key] != v {
			t.Errorf("rollout-merge's pods lack %s=%s", key, v)
		}
	}
}

// secretName is the Secret of Redis's password and the cookie key (kustomization.yaml).
const secretName = "rollout-secrets"

// kubeletArgs are c's args as the kubelet runs them: $(VAR) replaced by the value of c's env
// VAR (from secret, by the key of secretName it names), and a path under a volume mount of
// secretName replaced by a file holding that key's value.
func kubeletArgs(t *testing.T, c corev1.Container, pod corev1.PodSpec, secret map[string]string) []string {
	t.Helper()
	vars := map[string]string{}
	for _, ev := range c.Env {
		if r := ev.ValueFrom; r != nil && r.SecretKeyRef != nil {
			if r.SecretKeyRef.Name != secretName {
				t.Fatalf("%s: env %s from Secret %s, want %s", c.Name, ev.Name, r.SecretKeyRef.Name, secretName)
			}
			v, ok := secret[r.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("%s: env %s from key %q of %s, which has none", c.Name, ev.Name, r.SecretKeyRef.Key, secretName)
			}
			vars[ev.Name] = v
		}
	}
	files := map[string]string{} // mounted path → a local file of the same content
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			if v.Secret.SecretName != secretName {
				t.Fatalf("%s: volume %s of Secret %s, want %s", c.Name, v.Name, v.Secret.SecretName, secretName)
			}
			for _, it := range v.Secret.Items {
				local := filepath.Join(t.TempDir(), path.Base(it.Path))
				if err := os.WriteFile(local, []byte(secret[it.Key]+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				files[path.Join(vm.MountPath, it.Path)] = local
			}
		}
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if local, ok := files[a]; ok {
			a = local
		}
		args[i] = a
	}
	return args
}
