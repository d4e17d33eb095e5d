package projection_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The Pods here are built as bench/scenario builds the benchmarks' Pods (that
// module cannot be imported from this one): labels, annotations, an owner,
// managed fields, two containers with env, ports, probes, resources and
// mounts, three volumes, tolerations, and a status with four conditions and
// two container statuses (~4 KB as JSON).

var created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func ptr[T any](v T) *T { return &v }

// testPod is Pod i; deleting marks it as being deleted.
func testPod(i int, deleting bool) *corev1.Pod {
	app := fmt.Sprintf("app-%d", i%50)
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-7d9f8c6b5-%05d", app, i), Namespace: fmt.Sprintf("ns-%03d", i%10),
			UID:             types.UID(fmt.Sprintf("%08x-1d2e-4f50-8a6b-%012x", i, i*7919)),
			ResourceVersion: fmt.Sprint(i + 1), CreationTimestamp: created, GenerateName: app + "-7d9f8c6b5-", Generation: int64(i%3 + 1),
			Labels: map[string]string{"app": app, "tier": "backend", "pod-template-hash": "7d9f8c6b5"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-01-02T03:04:05Z",
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8c6b5",
				UID: types.UID(fmt.Sprintf("0c1d2e3f-0000-4000-8000-%012x", i%50)), Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
			Finalizers: []string{"example.com/cleanup"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1", Time: &created, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`)}}},
		},
		Spec:   testSpec(i, app),
		Status: testStatus(i),
	}
	if deleting {
		pod.DeletionTimestamp = ptr(metav1.NewTime(created.Add(time.Hour)))
		pod.DeletionGracePeriodSeconds = ptr(int64(30))
	}
	return pod
}

func testSpec(i int, app string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "app", Image: fmt.Sprintf("registry.example.com/team/%s:v1.%d.0", app, i%20), ImagePullPolicy: corev1.PullIfNotPresent,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "UPSTREAM_URL", Value: fmt.Sprintf("https://upstream-%d.example.internal:8443", i%10)}},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "tls", MountPath: "/etc/tls", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			LivenessProbe:          &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromString("http")}}},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}, {
			Name: "sidecar", Image: "registry.example.com/infra/proxy:v2.3.1", ImagePullPolicy: corev1.PullIfNotPresent,
			Args:                   []string{"--listen=:15001", "--upstream=127.0.0.1:8080", "--log-level=warn"},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}},
			{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: app + "-tls", DefaultMode: ptr(int32(0o644))}}},
			{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}}}}},
		},
		RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, ServiceAccountName: "default",
		NodeName: fmt.Sprintf("node-%03d", i%200), SchedulerName: "default-scheduler", TerminationGracePeriodSeconds: ptr(int64(30)),
		Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))}},
	}
}

func testStatus(i int) corev1.PodStatus {
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: created, ObservedGeneration: int64(i % 3)}
	}
	started := metav1.NewTime(created.Add(3 * time.Second))
	status := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, Image: image, ImageID: image + "@sha256:" + strings.Repeat("ab", 32),
			ContainerID: fmt.Sprintf("containerd://%064x", uint64(i)*2654435761+uint64(len(name))), Started: ptr(true), RestartCount: int32(i % 4),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
	}
	return corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{cond(corev1.PodInitialized), cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
		HostIP:     fmt.Sprintf("10.0.0.%d", i%200), PodIP: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250),
		PodIPs:    []corev1.PodIP{{IP: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250)}},
		StartTime: &started, QOSClass: corev1.PodQOSBurstable,
		ContainerStatuses: []corev1.ContainerStatus{status("app", fmt.Sprintf("registry.example.com/team/app-%d:v1.%d.0", i%50, i%20)),
			status("sidecar", "registry.example.com/infra/proxy:v2.3.1")},
	}
}

// marshal is pod's protobuf encoding, as the API server puts it in the
// envelope's raw field.
func marshal(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	b, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
