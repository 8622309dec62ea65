package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/kvserve/kvserve/internal/cluster"
)

// k8sDir holds the Kubernetes manifests (relative to this package).
const k8sDir = "../../deploy/k8s"

// manifests is every object of deploy/k8s, decoded strictly into the
// Kubernetes API's own types.
type manifests struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	claims       []*corev1.PersistentVolumeClaim
	policies     []*networkingv1.NetworkPolicy
}

// workload is a Deployment's or StatefulSet's pod template, with what the
// checks need around it.
type workload struct {
	kind, name string
	replicas   int32
	selector   map[string]string
	pod        *corev1.PodTemplateSpec
	claims     []corev1.PersistentVolumeClaim // a StatefulSet's volumeClaimTemplates
}

func (m *manifests) workloads() []workload {
	var out []workload
	for _, d := range m.deployments {
		out = append(out, workload{kind: "Deployment", name: d.Name, replicas: ptrValue(d.Spec.Replicas), selector: d.Spec.Selector.MatchLabels, pod: &d.Spec.Template})
	}
	for _, s := range m.statefulSets {
		out = append(out, workload{kind: "StatefulSet", name: s.Name, replicas: ptrValue(s.Spec.Replicas), selector: s.Spec.Selector.MatchLabels,
			pod: &s.Spec.Template, claims: s.Spec.VolumeClaimTemplates})
	}
	return out
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// loadManifests reads the files kustomization.yaml lists (and checks that
// it lists every manifest of the directory) and decodes each document
// strictly: an unknown or misspelt field, a duplicate key or a kind the
// test does not know fails.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	data, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &kust); err != nil || kust.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %v (kind %q)", err, kust.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(kust.Resources))
	if !slices.Equal(got, want) {
		t.Fatalf("kustomization.yaml lists %v; the directory has %v", got, want)
	}

	m := &manifests{}
	for _, name := range kust.Resources {
		data, err := os.ReadFile(filepath.Join(k8sDir, name))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			where := fmt.Sprintf("%s, document %d", name, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				d := &appsv1.Deployment{}
				m.deployments, obj = append(m.deployments, d), d
			case "apps/v1 StatefulSet":
				s := &appsv1.StatefulSet{}
				m.statefulSets, obj = append(m.statefulSets, s), s
			case "v1 Service":
				s := &corev1.Service{}
				m.services, obj = append(m.services, s), s
			case "v1 ConfigMap":
				c := &corev1.ConfigMap{}
				m.configMaps, obj = append(m.configMaps, c), c
			case "v1 PersistentVolumeClaim":
				c := &corev1.PersistentVolumeClaim{}
				m.claims, obj = append(m.claims, c), c
			case "networking.k8s.io/v1 NetworkPolicy":
				p := &networkingv1.NetworkPolicy{}
				m.policies, obj = append(m.policies, p), p
			default:
				// A Secret in particular: its values must never be in the
				// repository.
				t.Fatalf("%s: kind %q of %q is not one the manifests may hold", where, tm.Kind, tm.APIVersion)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s (%s): %v", where, tm.Kind, err)
			}
		}
	}
	return m
}

// TestK8sManifests: the manifests under deploy/k8s decode strictly into
// the Kubernetes API's types, their kvserve commands parse with the real
// commands' flags (arguments and KVSERVE_ variables), every Service and
// probe names a port the pods it selects have, secrets come from the
// Secret only, the NATS configuration parses with nats-server's own
// parser and its routes name the StatefulSet's pods, and the sizes given
// to kvserve fit the resources requested.
func TestK8sManifests(t *testing.T) {
	m := loadManifests(t)
	ws := m.workloads()
	if len(ws) != 3 || len(m.services) == 0 {
		t.Fatalf("want the gateway, worker and NATS workloads with their Services, got %d workloads, %d services", len(ws), len(m.services))
	}
	byName := map[string]workload{}
	for _, w := range ws {
		byName[w.name] = w
		if !labelsMatch(w.selector, w.pod.Labels) {
			t.Errorf("%s %s: selector %v does not select its own pods %v", w.kind, w.name, w.selector, w.pod.Labels)
		}
		checkPod(t, w, m)
	}

	// The kvserve containers: flags the real commands accept, and what they
	// imply.
	commands := map[string]func() *cobra.Command{"worker": newWorkerCmd, "gateway": newGatewayCmd}
	seen := map[string]*kvserveContainer{}
	for _, w := range ws {
		for i := range w.pod.Spec.Containers {
			c := &w.pod.Spec.Containers[i]
			if !slices.Equal(c.Command, []string{"kvserve"}) {
				continue
			}
			if len(c.Args) == 0 || commands[c.Args[0]] == nil {
				t.Fatalf("%s/%s: args %q: want kvserve worker or gateway", w.name, c.Name, c.Args)
			}
			kc := parseKvserve(t, w, c, commands[c.Args[0]]())
			seen[c.Args[0]] = kc
		}
	}
	worker, gateway := seen["worker"], seen["gateway"]
	if worker == nil || gateway == nil {
		t.Fatalf("want a kvserve worker and a kvserve gateway container, got %v", slices.Sorted(maps.Keys(seen)))
	}
	for _, flag := range []string{"model", "model-id"} {
		if a, b := worker.flag(flag), gateway.flag(flag); a != b || a == "" {
			t.Errorf("--%s: worker %q, gateway %q: a gateway sends requests only to workers of its model id", flag, a, b)
		}
	}
	checkMounted(t, worker, "model")
	checkMounted(t, gateway, "model")
	checkMounted(t, worker, "data-dir")
	checkMounted(t, gateway, "data-dir")

	// The worker: the grace period covers its drain, its memory request
	// its KV cache and host tier (never "auto": that reads the node's
	// memory, not the pod's), its data volume its disk tier.
	ww := byName[worker.workload]
	drain := worker.flag("drain-timeout")
	if g := ww.pod.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= mustDuration(t, drain).Seconds() {
		t.Errorf("worker: terminationGracePeriodSeconds %s does not exceed --drain-timeout %s", grace(g), drain)
	}
	kvMem := int64(*worker.cmd.Flags().Lookup("kv-cache-memory").Value.(*byteSize))
	hostMem := int64(*worker.cmd.Flags().Lookup("kv-host-memory").Value.(*hostSize))
	disk := int64(*worker.cmd.Flags().Lookup("kv-disk").Value.(*hostSize))
	if kvMem <= 0 || hostMem == 0 || disk == 0 {
		t.Errorf("worker: --kv-cache-memory, --kv-host-memory and --kv-disk must be set (auto reads the node's memory and disk, not the pod's)")
	}
	mem := worker.container.Resources.Requests[corev1.ResourceMemory]
	if need := kvMem + max(hostMem, 0); mem.Value() <= need {
		t.Errorf("worker: memory request %s does not exceed the KV cache and host tier (%d bytes)", mem.String(), need)
	}
	if disk > 0 {
		vol := claimFor(ww, worker.mountOf(worker.flag("data-dir")))
		if vol == nil {
			t.Errorf("worker: --kv-disk set but its data directory is not on a volume claim")
		} else if size := vol.Spec.Resources.Requests[corev1.ResourceStorage]; size.Value() <= disk {
			t.Errorf("worker: data volume %s does not exceed --kv-disk (%d bytes)", size.String(), disk)
		}
	}
	gw := byName[gateway.workload]
	// Gateways behind one Service share one tenant store, kept on every
	// NATS server (a copy per server: losing one loses no key).
	if st := gateway.flag("state"); st != "nats" {
		t.Errorf("gateway: --state %s: %d gateways would each keep their own tenants and keys", st, gw.replicas)
	}
	if r := gateway.flag("state-replicas"); r != fmt.Sprint(natsReplicas(m)) {
		t.Errorf("gateway: --state-replicas %s, want one copy per NATS server (%d)", r, natsReplicas(m))
	}
	sd := gateway.cmd.Flags().Lookup("shutdown-timeout").Value.String()
	if g := gw.pod.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= mustDuration(t, sd).Seconds() {
		t.Errorf("gateway: terminationGracePeriodSeconds %s does not exceed --shutdown-timeout %s", grace(g), sd)
	}

	// The gateway listens on the port its Service and probes name.
	addr := gateway.flag("addr")
	if isLoopback(addr) {
		t.Errorf("gateway: --addr %s is loopback: nothing outside the pod reaches it", addr)
	}
	port := containerPort(gateway.container, intstr.FromString("http"))
	if port == 0 || !strings.HasSuffix(addr, fmt.Sprintf(":%d", port)) {
		t.Errorf("gateway: --addr %s, container port http %d", addr, port)
	}
	probes := map[string]*corev1.Probe{"/health": gateway.container.LivenessProbe, "/ready": gateway.container.ReadinessProbe}
	for p, probe := range probes {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != p || containerPort(gateway.container, probe.HTTPGet.Port) != port {
			t.Errorf("gateway: want a probe of %s on port %d, got %+v", p, port, probe)
		}
	}
	if !slices.ContainsFunc(m.services, func(s *corev1.Service) bool {
		return labelsMatch(s.Spec.Selector, gw.pod.Labels) && len(s.Spec.Ports) > 0
	}) {
		t.Errorf("no Service with ports selects the gateways")
	}

	checkNATS(t, m)
}

// kvserveContainer is a kvserve container with its command parsed.
type kvserveContainer struct {
	workload  string
	container *corev1.Container
	cmd       *cobra.Command
}

func (k *kvserveContainer) flag(name string) string {
	v := k.cmd.Flags().Lookup(name).Value
	if s, ok := v.(pflag.SliceValue); ok { // a repeatable flag (the gateway's --model): its values
		return strings.Join(s.GetSlice(), ",")
	}
	return v.String()
}

// mountOf returns the volume mounted at the directory holding p (or at p).
func (k *kvserveContainer) mountOf(p string) string {
	best := ""
	name := ""
	for _, vm := range k.container.VolumeMounts {
		if (p == vm.MountPath || strings.HasPrefix(p, strings.TrimSuffix(vm.MountPath, "/")+"/")) && len(vm.MountPath) > len(best) {
			best, name = vm.MountPath, vm.Name
		}
	}
	return name
}

// checkMounted: the path a flag names is on a volume.
func checkMounted(t *testing.T, k *kvserveContainer, flag string) {
	t.Helper()
	if v := k.flag(flag); v == "" || k.mountOf(v) == "" {
		t.Errorf("%s: --%s %q is on no volume", k.workload, flag, v)
	}
}

// parseKvserve parses c's arguments and KVSERVE_ variables with cmd's
// flags, as the command itself does (applyLayers): an unknown flag, a
// variable naming no flag or a value that does not parse fails. Values
// from a Secret or the pod's fields stand in as a realistic value.
func parseKvserve(t *testing.T, w workload, c *corev1.Container, cmd *cobra.Command) *kvserveContainer {
	t.Helper()
	where := w.name + "/" + c.Name
	if err := cmd.ParseFlags(c.Args[1:]); err != nil {
		t.Fatalf("%s: kvserve %s %q: %v", where, c.Args[0], c.Args[1:], err)
	}
	if rest := cmd.Flags().Args(); len(rest) > 0 {
		t.Fatalf("%s: kvserve %s takes no arguments, got %q", where, c.Args[0], rest)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "KVSERVE_") {
			continue
		}
		found := false
		cmd.Flags().VisitAll(func(f *pflag.Flag) { found = found || envName(f.Name) == e.Name })
		if !found {
			t.Errorf("%s: %s names no flag of kvserve %s", where, e.Name, c.Args[0])
		}
		switch {
		case e.Value != "":
			env[e.Name] = e.Value
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = map[string]string{
				"KVSERVE_NATS":    "nats://kvserve:password@kvserve-nats:4222",
				"KVSERVE_API_KEY": "sk-1=tenant-1,sk-admin",
			}[e.Name]
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = w.name + "-0"
		default:
			t.Errorf("%s: %s has neither a value, a Secret nor the pod's name", where, e.Name)
		}
	}
	// Secrets only from the Secret: never a key or a NATS password in
	// the manifests.
	for _, name := range []string{"api-key", "nats"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			t.Errorf("%s: --%s given as an argument: it belongs in the Secret (KVSERVE_%s from a secretKeyRef)", where, name, strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
		}
		if e := envVar(c, envName(name)); e != nil && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("%s: %s is not from a Secret", where, e.Name)
		}
	}
	if err := applyLayers(cmd.Flags(), "config", func(k string) string { return env[k] }); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if c.Args[0] == "worker" {
		if err := cluster.ValidID(env["KVSERVE_ID"]); env["KVSERVE_ID"] != "" && err != nil {
			t.Errorf("%s: the pod's name as worker id: %v", where, err)
		}
	}
	return &kvserveContainer{workload: w.name, container: c, cmd: cmd}
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkPod: every container requests CPU and memory, mounts volumes the
// pod has, reads Secrets only by reference, and every Service selecting
// the pods names ports they have.
func checkPod(t *testing.T, w workload, m *manifests) {
	t.Helper()
	spec := &w.pod.Spec
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range w.claims {
		vols[c.Name] = true
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		where := w.name + "/" + c.Name
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
				t.Errorf("%s: no %s request", where, r)
			}
		}
		if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			if req := c.Resources.Requests[corev1.ResourceMemory]; lim.Cmp(req) < 0 {
				t.Errorf("%s: memory limit %s below its request %s", where, lim.String(), req.String())
			}
		}
		for _, vm := range c.VolumeMounts {
			if !vols[vm.Name] {
				t.Errorf("%s: mounts volume %q the pod does not have", where, vm.Name)
			}
		}
		if c.Image == "" {
			t.Errorf("%s: no image", where)
		}
	}
	for _, c := range spec.Containers {
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if p != nil && p.HTTPGet != nil && containerPort(&c, p.HTTPGet.Port) == 0 {
				t.Errorf("%s/%s: probe on port %s, which the container does not have", w.name, c.Name, p.HTTPGet.Port.String())
			}
		}
	}
	for _, s := range m.services {
		if !labelsMatch(s.Spec.Selector, w.pod.Labels) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if !slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return containerPort(&c, p.TargetPort) != 0 }) {
				t.Errorf("Service %s port %s: target %s is no port of %s's containers", s.Name, p.Name, p.TargetPort.String(), w.name)
			}
		}
	}
	for _, p := range m.policies {
		if !labelsMatch(p.Spec.PodSelector.MatchLabels, w.pod.Labels) {
			continue
		}
		for _, in := range p.Spec.Ingress {
			for _, port := range in.Ports {
				if port.Port == nil || !slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return containerPort(&c, *port.Port) != 0 }) {
					t.Errorf("NetworkPolicy %s: port %v is no port of %s's containers", p.Name, port.Port, w.name)
				}
			}
		}
	}
}

// containerPort resolves a port by name or number among c's ports (0: not
// there).
func containerPort(c *corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort
		}
	}
	return 0
}

// labelsMatch reports whether selector (non-empty) selects labels.
func labelsMatch(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// claimFor returns the volume claim template (or the claim a volume
// names) behind volume name of w.
func claimFor(w workload, name string) *corev1.PersistentVolumeClaim {
	for i := range w.claims {
		if w.claims[i].Name == name {
			return &w.claims[i]
		}
	}
	return nil
}

// grace prints a terminationGracePeriodSeconds.
func grace(g *int64) string {
	if g == nil {
		return "unset (30)"
	}
	return fmt.Sprint(*g)
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkNATS: the NATS StatefulSet's configuration parses with nats-server's
// own parser; its ports are the container's and the Services'; its routes
// name each pod of the StatefulSet through its headless Service; a
// Service gives clients the client port.
// natsReplicas is the number of NATS servers the manifests run.
func natsReplicas(m *manifests) int32 {
	for _, s := range m.statefulSets {
		for _, c := range s.Spec.Template.Spec.Containers {
			if strings.HasPrefix(c.Image, "nats:") {
				return ptrValue(s.Spec.Replicas)
			}
		}
	}
	return 0
}

func checkNATS(t *testing.T, m *manifests) {
	t.Helper()
	var sts *appsv1.StatefulSet
	for _, s := range m.statefulSets {
		for _, c := range s.Spec.Template.Spec.Containers {
			if strings.HasPrefix(c.Image, "nats:") {
				sts = s
			}
		}
	}
	if sts == nil {
		t.Fatal("no NATS StatefulSet")
	}
	if ptrValue(sts.Spec.Replicas) != 3 {
		t.Errorf("NATS: %d replicas, want a three-node cluster", ptrValue(sts.Spec.Replicas))
	}
	c := &sts.Spec.Template.Spec.Containers[0]
	confPath := ""
	for i, a := range c.Args {
		if a == "--config" && i+1 < len(c.Args) {
			confPath = c.Args[i+1]
		}
	}
	var conf string
	for _, vm := range c.VolumeMounts {
		if path.Dir(confPath) != vm.MountPath {
			continue
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				for _, cm := range m.configMaps {
					if cm.Name == v.ConfigMap.Name {
						conf = cm.Data[path.Base(confPath)]
					}
				}
			}
		}
	}
	if conf == "" {
		t.Fatalf("NATS: --config %q is in no ConfigMap the pod mounts", confPath)
	}
	// The variables the configuration reads, as the pod's env sets them.
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = "from-" + e.Name // a Secret or the pod's name
		}
		t.Setenv(e.Name, v)
	}
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("NATS: nats.conf: %v", err)
	}
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= opts.LameDuckDuration.Seconds() {
		t.Errorf("NATS: terminationGracePeriodSeconds %s does not exceed lame_duck_duration %s", grace(g), opts.LameDuckDuration)
	}
	if opts.Password == "" || !strings.HasPrefix(opts.Password, "from-") {
		t.Errorf("NATS: clients are not asked for the password from the Secret (%q)", opts.Password)
	}
	for name, want := range map[string]int{"client": opts.Port, "cluster": opts.Cluster.Port, "monitor": opts.HTTPPort} {
		if got := containerPort(c, intstr.FromString(name)); int(got) != want || want == 0 {
			t.Errorf("NATS: container port %s is %d, nats.conf says %d", name, got, want)
		}
	}
	headless := ""
	for _, s := range m.services {
		if s.Name == sts.Spec.ServiceName {
			if s.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("NATS: Service %s is not headless", s.Name)
			}
			headless = s.Name
		}
	}
	if headless == "" {
		t.Fatalf("NATS: no Service %q (the StatefulSet's serviceName)", sts.Spec.ServiceName)
	}
	var routes []string
	for _, u := range opts.Routes {
		routes = append(routes, u.Host)
	}
	var want []string
	for i := range ptrValue(sts.Spec.Replicas) {
		want = append(want, fmt.Sprintf("%s-%d.%s:%d", sts.Name, i, headless, opts.Cluster.Port))
	}
	if !slices.Equal(routes, want) {
		t.Errorf("NATS: routes %v, want every pod of the StatefulSet: %v", routes, want)
	}
	// The clients' Service (the host of the Secret's nats-url): the NATS
	// pods' client port, load-balanced.
	if !slices.ContainsFunc(m.services, func(s *corev1.Service) bool {
		return s.Spec.ClusterIP != corev1.ClusterIPNone && labelsMatch(s.Spec.Selector, sts.Spec.Template.Labels) &&
			slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return containerPort(c, p.TargetPort) == int32(opts.Port) })
	}) {
		t.Errorf("NATS: no Service gives clients the NATS pods' client port %d", opts.Port)
	}
}
