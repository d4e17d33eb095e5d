package scenario

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The generators below build realistic objects deterministically from an
// index, every string and slice freshly allocated, as decoding would.

var created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

const configFiller = "log:\n  level: info\n  format: json\nserver:\n  port: 8080\n  timeout: 30s\n  " +
	"maxConnections: 1000\nfeatures:\n  alpha: false\n  beta: true\ncache:\n  size: 512Mi\n  ttl: 10m\n" +
	"upstream:\n  - name: primary\n    url: https://primary.example.internal:8443\n  - name: secondary\n" +
	"    url: https://secondary.example.internal:8443\nretry:\n  attempts: 5\n  backoff: 200ms\n" +
	"metrics:\n  enabled: true\n  path: /metrics\n"

const configMapFields = `{"f:data":{".":{},"f:config.yaml":{},"f:version":{}},"f:metadata":{"f:annotations":` +
	`{".":{},"f:ctrlkit.io/checksum":{},"f:ctrlkit.io/owner":{}},"f:labels":{".":{},"f:app":{},"f:team":{},"f:tier":{}}}}`

// configMap is object i of a list spread over namespaces: 4 labels, 2
// annotations, ~500 bytes of data, one managedFields entry.
func configMap(i, namespaces int, rv string) corev1.ConfigMap {
	return corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{Kind: fresh("ConfigMap"), APIVersion: fresh("v1")},
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("cm-%07d", i),
			Namespace:         fmt.Sprintf("ns-%03d", i%namespaces),
			UID:               types.UID(fmt.Sprintf("%08x-1d2e-4f50-8a6b-%012x", i, i*7919)),
			ResourceVersion:   rv,
			CreationTimestamp: created,
			Labels: map[string]string{fresh("app"): fmt.Sprintf("app-%d", i%50), fresh("tier"): fresh("backend"),
				fresh("team"): fmt.Sprintf("team-%d", i%7), fresh("release"): fmt.Sprintf("r-%d", i%13)},
			Annotations: map[string]string{fresh("ctrlkit.io/owner"): fmt.Sprintf("team-%d@example.com", i%7),
				fresh("ctrlkit.io/checksum"): fmt.Sprintf("sha256:%064x", uint64(i)*2654435761)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: fresh("kubectl-client-side-apply"), Operation: fresh(metav1.ManagedFieldsOperationUpdate),
				APIVersion: fresh("v1"), Time: &created, FieldsType: fresh("FieldsV1"), FieldsV1: &metav1.FieldsV1{Raw: []byte(configMapFields)}}},
		},
		Data: map[string]string{fresh("config.yaml"): fmt.Sprintf("# object %d\n%s", i, configFiller), fresh("version"): strconv.Itoa(i % 97)},
	}
}

// rvString is resource version n.
func rvString(n int) string { return strconv.Itoa(n) }

const podFields = `{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:tier":{}},"f:ownerReferences":{".":{},` +
	`"k:{\"uid\":\"0c1d2e3f\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{".":{},` +
	`"k:{\"name\":\"LOG_LEVEL\"}":{".":{},"f:name":{},"f:value":{}},"k:{\"name\":\"PORT\"}":{".":{},"f:name":{},"f:value":{}}},` +
	`"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},` +
	`"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:readinessProbe":{".":{},"f:httpGet":{".":{},"f:path":{},"f:port":{}}},` +
	`"f:resources":{".":{},"f:limits":{".":{},"f:cpu":{},"f:memory":{}},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},` +
	`"f:volumeMounts":{".":{},"k:{\"mountPath\":\"/etc/app\"}":{".":{},"f:mountPath":{},"f:name":{}}}},` +
	`"k:{\"name\":\"sidecar\"}":{".":{},"f:image":{},"f:name":{}}},"f:volumes":{".":{},"k:{\"name\":\"config\"}":{".":{},` +
	`"f:configMap":{".":{},"f:name":{}},"f:name":{}}}}}`

// pod is Pod i: two containers with env, ports, probes, resources and
// mounts; three volumes; a status with four conditions and two container
// statuses; an owner reference and one managedFields entry (~4 KB as JSON).
// What repeats across Pods repeats as in a cluster: 50 apps (each a
// ReplicaSet owning its Pods, with its labels, config volume and image in
// 20 versions, digests by image), 200 nodes, one sidecar image, the same
// env, tolerations and projected token volume everywhere; names, UIDs, Pod
// IPs and container IDs are unique.
func pod(i, namespaces int, rv string) corev1.Pod {
	ns := fmt.Sprintf("ns-%03d", i%namespaces)
	app := fmt.Sprintf("app-%d", i%50)
	return corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: fresh("Pod"), APIVersion: fresh("v1")},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", app, i), Namespace: ns,
			UID:             types.UID(fmt.Sprintf("%08x-1d2e-4f50-8a6b-%012x", i, i*7919)),
			ResourceVersion: rv, CreationTimestamp: created, GenerateName: app + fresh("-7d9f8c6b5-"),
			Labels: map[string]string{fresh("app"): app, fresh("tier"): fresh("backend"), fresh("pod-template-hash"): fresh("7d9f8c6b5")},
			Annotations: map[string]string{fresh("kubectl.kubernetes.io/restartedAt"): fresh("2026-01-02T03:04:05Z"),
				fresh("prometheus.io/scrape"): fresh("true"), fresh("prometheus.io/port"): fresh("9090")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fresh("apps/v1"), Kind: fresh("ReplicaSet"), Name: app + fresh("-7d9f8c6b5"),
				UID: types.UID(fmt.Sprintf("0c1d2e3f-0000-4000-8000-%012x", i%50)), Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: fresh("kube-controller-manager"), Operation: fresh(metav1.ManagedFieldsOperationUpdate),
				APIVersion: fresh("v1"), Time: &created, FieldsType: fresh("FieldsV1"), FieldsV1: &metav1.FieldsV1{Raw: []byte(podFields)}}},
		},
		Spec:   podSpec(i, app),
		Status: podStatus(i),
	}
}

// Pod is Pod i of a cluster spread over namespaces, as the benchmarks'
// caches hold it (see pod), for benchmarks outside this package.
func Pod(i, namespaces int) corev1.Pod { return pod(i, namespaces, rvString(i+1)) }

func podSpec(i int, app string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: fresh("app"), Image: fmt.Sprintf("registry.example.com/team/%s:v1.%d.0", app, i%20), ImagePullPolicy: fresh(corev1.PullIfNotPresent),
			Ports: []corev1.ContainerPort{{Name: fresh("http"), ContainerPort: 8080, Protocol: fresh(corev1.ProtocolTCP)},
				{Name: fresh("metrics"), ContainerPort: 9090, Protocol: fresh(corev1.ProtocolTCP)}},
			Env: []corev1.EnvVar{{Name: fresh("LOG_LEVEL"), Value: fresh("info")}, {Name: fresh("PORT"), Value: fresh("8080")},
				{Name: fresh("POD_NAME"), ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: fresh("v1"), FieldPath: fresh("metadata.name")}}},
				{Name: fresh("POD_NAMESPACE"), ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: fresh("v1"), FieldPath: fresh("metadata.namespace")}}},
				{Name: fresh("UPSTREAM_URL"), Value: fmt.Sprintf("https://upstream-%d.example.internal:8443", i%10)},
				{Name: fresh("CACHE_SIZE"), Value: fresh("512Mi")}, {Name: fresh("FEATURE_FLAGS"), Value: fresh("alpha=false,beta=true")}},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{fresh(corev1.ResourceCPU): resource.MustParse("500m"), fresh(corev1.ResourceMemory): resource.MustParse("512Mi")},
				Requests: corev1.ResourceList{fresh(corev1.ResourceCPU): resource.MustParse("100m"), fresh(corev1.ResourceMemory): resource.MustParse("128Mi")}},
			VolumeMounts: []corev1.VolumeMount{{Name: fresh("config"), MountPath: fresh("/etc/app")}, {Name: fresh("tls"), MountPath: fresh("/etc/tls"), ReadOnly: true},
				{Name: fresh("kube-api-access"), MountPath: fresh("/var/run/secrets/kubernetes.io/serviceaccount"), ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: fresh("/healthz"), Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			TerminationMessagePath: fresh("/dev/termination-log"), TerminationMessagePolicy: fresh(corev1.TerminationMessageReadFile),
		}, {
			Name: fresh("sidecar"), Image: fresh("registry.example.com/infra/proxy:v2.3.1"), ImagePullPolicy: fresh(corev1.PullIfNotPresent),
			Args:                   []string{fresh("--listen=:15001"), fresh("--upstream=127.0.0.1:8080"), fresh("--log-level=warn")},
			TerminationMessagePath: fresh("/dev/termination-log"), TerminationMessagePolicy: fresh(corev1.TerminationMessageReadFile),
		}},
		Volumes: []corev1.Volume{
			{Name: fresh("config"), VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + fresh("-config")}}}},
			{Name: fresh("tls"), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: app + fresh("-tls")}}},
			{Name: fresh("kube-api-access"), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: fresh("token"), ExpirationSeconds: ptr(int64(3607))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: fresh("kube-root-ca.crt")},
					Items: []corev1.KeyToPath{{Key: fresh("ca.crt"), Path: fresh("ca.crt")}}}}}}}},
		},
		RestartPolicy: fresh(corev1.RestartPolicyAlways), DNSPolicy: fresh(corev1.DNSClusterFirst), ServiceAccountName: fresh("default"),
		NodeName: fmt.Sprintf("node-%03d", i%200), SchedulerName: fresh("default-scheduler"), TerminationGracePeriodSeconds: ptr(int64(30)),
		Tolerations: []corev1.Toleration{{Key: fresh("node.kubernetes.io/not-ready"), Operator: fresh(corev1.TolerationOpExists), Effect: fresh(corev1.TaintEffectNoExecute), TolerationSeconds: ptr(int64(300))},
			{Key: fresh("node.kubernetes.io/unreachable"), Operator: fresh(corev1.TolerationOpExists), Effect: fresh(corev1.TaintEffectNoExecute), TolerationSeconds: ptr(int64(300))}},
	}
}

func podStatus(i int) corev1.PodStatus {
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: fresh(t), Status: fresh(corev1.ConditionTrue), LastTransitionTime: created}
	}
	started := metav1.NewTime(created.Add(3 * time.Second))
	status := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, Image: image, ImageID: fmt.Sprintf("%s@sha256:%064x", image, imageDigest(image)),
			ContainerID: fmt.Sprintf("containerd://%064x", uint64(i)*2654435761+uint64(len(name))), Started: ptr(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
	}
	return corev1.PodStatus{
		Phase:      fresh(corev1.PodRunning),
		Conditions: []corev1.PodCondition{cond(corev1.PodInitialized), cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
		HostIP:     fmt.Sprintf("10.0.%d.%d", i%200/250, i%200), PodIP: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250),
		PodIPs:    []corev1.PodIP{{IP: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250)}},
		StartTime: &started, QOSClass: fresh(corev1.PodQOSBurstable),
		ContainerStatuses: []corev1.ContainerStatus{status(fresh("app"), fmt.Sprintf("registry.example.com/team/app-%d:v1.%d.0", i%50, i%20)),
			status(fresh("sidecar"), fresh("registry.example.com/infra/proxy:v2.3.1"))},
	}
}

func ptr[T any](v T) *T { return &v }

// imageDigest is the digest of an image: the same for every Pod running it,
// as in a cluster.
func imageDigest(image string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(image))
	return h.Sum64()
}

// fresh returns a newly allocated copy of s, as a decoder's strings are:
// literals in these generators would otherwise live in the binary and cost
// the heap nothing.
func fresh[S ~string](s S) S { return S(strings.Clone(string(s))) }
