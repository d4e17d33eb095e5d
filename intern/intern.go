// Package intern makes cached objects share the strings that repeat across
// them: namespaces, label and annotation keys and common values, owner
// kinds, names and UIDs, images, container and volume names, condition
// types, and so on. A decoder allocates every string of every object anew,
// so a cache of 50,000 Pods otherwise holds 50,000 copies of
// "kubernetes.io/service-account-token" and of each image name.
//
// Interning is done with the standard library's unique package: a string's
// canonical copy lives only as long as some object uses it, so the table is
// bounded by the distinct strings of the objects cached now. Only fields
// that repeat in real clusters are interned; names, UIDs of the objects
// themselves, IPs and container IDs, which are unique, are left alone (an
// entry for a unique string would cost more than it saves).
//
// The informer interns every object it caches unless
// informer.Options.DisableInterning is set. Objects are changed in place:
// call Object only on an object nothing else reads yet, as a transform
// does.
package intern

import (
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxValue is the longest label or annotation value, env value or argument
// interned: longer ones (certificates, JSON blobs, checksums) rarely repeat.
const maxValue = 128

// String returns the canonical copy of s: equal strings interned anywhere
// in the process share one backing array.
func String(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// of interns a string-kinded value (a typed constant like corev1.Protocol).
func of[S ~string](s S) S { return S(String(string(s))) }

// short interns s when it is short enough to be likely to repeat.
func short(s string) string {
	if len(s) > maxValue {
		return s
	}
	return String(s)
}

// Object interns the repeated strings of obj in place: the object metadata
// of any API object, and the spec and status of the types it knows (Pods,
// the largest and most numerous objects most controllers cache). Other
// types get their metadata interned.
func Object(obj any) {
	switch o := obj.(type) {
	case *corev1.Pod:
		Meta(&o.ObjectMeta)
		podSpec(&o.Spec)
		podStatus(&o.Status)
	case *corev1.ConfigMap:
		Meta(&o.ObjectMeta)
		for k, v := range o.Data {
			o.Data[String(k)] = v // values are the payload: left alone
		}
	case *corev1.Secret:
		Meta(&o.ObjectMeta)
		o.Type = of(o.Type)
	case interface{ GetObjectMeta() metav1.Object }:
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			Meta(m)
		}
	}
}

// Meta interns the repeated strings of object metadata: namespace,
// generateName, labels, annotation keys and short values, owner references
// and finalizers. managedFields, if kept, are left alone.
func Meta(m *metav1.ObjectMeta) {
	m.Namespace = String(m.Namespace)
	m.GenerateName = String(m.GenerateName)
	stringMap(m.Labels, String)
	stringMap(m.Annotations, short)
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name = String(r.APIVersion), String(r.Kind), String(r.Name)
		r.UID = of(r.UID) // shared by every object one owner owns
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = String(f)
	}
}

// stringMap interns m's keys and its values with value, in place (assigning
// to an existing key also replaces the map's copy of the key).
func stringMap(m map[string]string, value func(string) string) {
	for k, v := range m {
		m[String(k)] = value(v)
	}
}

func resourceList(l corev1.ResourceList) {
	for k, q := range l {
		l[of(k)] = q
	}
}

func podSpec(s *corev1.PodSpec) {
	for i := range s.InitContainers {
		container(&s.InitContainers[i])
	}
	for i := range s.Containers {
		container(&s.Containers[i])
	}
	for i := range s.Volumes {
		volume(&s.Volumes[i])
	}
	s.RestartPolicy, s.DNSPolicy = of(s.RestartPolicy), of(s.DNSPolicy)
	s.ServiceAccountName, s.DeprecatedServiceAccount = String(s.ServiceAccountName), String(s.DeprecatedServiceAccount)
	s.NodeName, s.SchedulerName, s.PriorityClassName = String(s.NodeName), String(s.SchedulerName), String(s.PriorityClassName)
	s.Subdomain = String(s.Subdomain)
	stringMap(s.NodeSelector, String)
	for i := range s.Tolerations {
		t := &s.Tolerations[i]
		t.Key, t.Operator, t.Value, t.Effect = String(t.Key), of(t.Operator), String(t.Value), of(t.Effect)
	}
	for i := range s.ImagePullSecrets {
		s.ImagePullSecrets[i].Name = String(s.ImagePullSecrets[i].Name)
	}
	if s.PreemptionPolicy != nil {
		p := of(*s.PreemptionPolicy)
		s.PreemptionPolicy = &p
	}
	if s.RuntimeClassName != nil {
		r := String(*s.RuntimeClassName)
		s.RuntimeClassName = &r
	}
}

func container(c *corev1.Container) {
	c.Name, c.Image, c.ImagePullPolicy = String(c.Name), String(c.Image), of(c.ImagePullPolicy)
	c.TerminationMessagePath, c.TerminationMessagePolicy = String(c.TerminationMessagePath), of(c.TerminationMessagePolicy)
	c.WorkingDir = String(c.WorkingDir)
	for i, a := range c.Command {
		c.Command[i] = short(a)
	}
	for i, a := range c.Args {
		c.Args[i] = short(a)
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		p.Name, p.Protocol = String(p.Name), of(p.Protocol)
	}
	for i := range c.Env {
		e := &c.Env[i]
		e.Name, e.Value = String(e.Name), short(e.Value)
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			f := e.ValueFrom.FieldRef
			f.APIVersion, f.FieldPath = String(f.APIVersion), String(f.FieldPath)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			r := e.ValueFrom.SecretKeyRef
			r.Name, r.Key = String(r.Name), String(r.Key)
		}
		if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			r := e.ValueFrom.ConfigMapKeyRef
			r.Name, r.Key = String(r.Name), String(r.Key)
		}
	}
	for i := range c.EnvFrom {
		e := &c.EnvFrom[i]
		e.Prefix = String(e.Prefix)
		if e.ConfigMapRef != nil {
			e.ConfigMapRef.Name = String(e.ConfigMapRef.Name)
		}
		if e.SecretRef != nil {
			e.SecretRef.Name = String(e.SecretRef.Name)
		}
	}
	resourceList(c.Resources.Limits)
	resourceList(c.Resources.Requests)
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath, m.SubPath = String(m.Name), String(m.MountPath), String(m.SubPath)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p != nil && p.HTTPGet != nil {
			p.HTTPGet.Path, p.HTTPGet.Scheme = String(p.HTTPGet.Path), of(p.HTTPGet.Scheme)
			p.HTTPGet.Port.StrVal = String(p.HTTPGet.Port.StrVal)
		}
	}
}

func volume(v *corev1.Volume) {
	v.Name = String(v.Name)
	switch {
	case v.ConfigMap != nil:
		v.ConfigMap.Name = String(v.ConfigMap.Name)
	case v.Secret != nil:
		v.Secret.SecretName = String(v.Secret.SecretName)
	case v.PersistentVolumeClaim != nil:
		v.PersistentVolumeClaim.ClaimName = String(v.PersistentVolumeClaim.ClaimName)
	case v.HostPath != nil:
		v.HostPath.Path = String(v.HostPath.Path)
	case v.Projected != nil:
		for i := range v.Projected.Sources {
			s := &v.Projected.Sources[i]
			if s.ServiceAccountToken != nil {
				s.ServiceAccountToken.Path = String(s.ServiceAccountToken.Path)
			}
			if s.ConfigMap != nil {
				s.ConfigMap.Name = String(s.ConfigMap.Name)
				keyToPaths(s.ConfigMap.Items)
			}
			if s.Secret != nil {
				s.Secret.Name = String(s.Secret.Name)
				keyToPaths(s.Secret.Items)
			}
			if s.DownwardAPI != nil {
				for j := range s.DownwardAPI.Items {
					f := &s.DownwardAPI.Items[j]
					f.Path = String(f.Path)
					if f.FieldRef != nil {
						f.FieldRef.APIVersion, f.FieldRef.FieldPath = String(f.FieldRef.APIVersion), String(f.FieldRef.FieldPath)
					}
				}
			}
		}
	}
}

func keyToPaths(items []corev1.KeyToPath) {
	for i := range items {
		items[i].Key, items[i].Path = String(items[i].Key), String(items[i].Path)
	}
}

func podStatus(s *corev1.PodStatus) {
	s.Phase, s.QOSClass, s.HostIP = of(s.Phase), of(s.QOSClass), String(s.HostIP)
	s.Reason, s.Message = String(s.Reason), short(s.Message)
	for i := range s.HostIPs {
		s.HostIPs[i].IP = String(s.HostIPs[i].IP)
	}
	for i := range s.Conditions {
		c := &s.Conditions[i]
		c.Type, c.Status, c.Reason = of(c.Type), of(c.Status), String(c.Reason)
	}
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			cs := &list[i]
			cs.Name, cs.Image, cs.ImageID = String(cs.Name), String(cs.Image), String(cs.ImageID)
			if w := cs.State.Waiting; w != nil {
				w.Reason = String(w.Reason)
			}
			if t := cs.State.Terminated; t != nil {
				t.Reason = String(t.Reason)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				t.Reason = String(t.Reason)
			}
		}
	}
}
