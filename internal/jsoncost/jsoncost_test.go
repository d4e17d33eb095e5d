package jsoncost_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/internal/jsoncost"
)

func TestEstimate_chargesObjectsAndElementsOutsideStrings(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want int64
	}{
		{``, 0},
		{`"a"`, 3},
		{`{}`, 2 + jsoncost.PerObject},
		{`[{},{}]`, 7 + 2*jsoncost.PerObject + 2*jsoncost.PerElement},
		{`{"a":"{[,]}"}`, 13 + jsoncost.PerObject},                          // braces in a string cost nothing
		{`{"a":"\"{,"}`, 12 + jsoncost.PerObject},                           // nor after an escaped quote
		{`{"a":"\\","b":1}`, 16 + jsoncost.PerObject + jsoncost.PerElement}, // an escaped backslash ends no string
	} {
		if got := jsoncost.Estimate([]byte(c.doc)); got != c.want {
			t.Errorf("Estimate(%s) = %d, want %d", c.doc, got, c.want)
		}
	}
}

// The estimate is of the order of what decoding takes, even for the
// costliest shape: an array of empty structs, each a few hundred bytes.
func TestEstimate_isOfTheOrderOfWhatDecodingAllocates(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  string
	}{
		{"empty containers", `{"spec":{"containers":[` + strings.Repeat(`{},`, 20_000) + `{}]}}`},
		{"a realistic pod", realisticPod},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var pod corev1.Pod
			if err := json.Unmarshal([]byte(c.doc), &pod); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			allocated := int64(after.TotalAlloc - before.TotalAlloc)
			est := jsoncost.Estimate([]byte(c.doc))
			if est*8 < allocated || est > allocated*20 {
				t.Errorf("estimate %d bytes, decoding allocated %d: not within 8x under or 20x over", est, allocated)
			}
			runtime.KeepAlive(pod)
		})
	}
}

const realisticPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-7d9f8c6b5-x2k4p","namespace":"default",` +
	`"labels":{"app":"web","pod-template-hash":"7d9f8c6b5"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet",` +
	`"name":"web-7d9f8c6b5","uid":"6f1c2d3e-4a5b-6c7d-8e9f-0a1b2c3d4e5f","controller":true,"blockOwnerDeletion":true}]},` +
	`"spec":{"containers":[{"name":"web","image":"registry.example.com/web:v1.2.3","ports":[{"containerPort":8080,"protocol":"TCP"}],` +
	`"env":[{"name":"MODE","value":"production"},{"name":"LOG_LEVEL","value":"info"}],"resources":{"requests":{"cpu":"100m","memory":"128Mi"}},` +
	`"readinessProbe":{"httpGet":{"path":"/healthz","port":8080},"periodSeconds":10}}],"nodeName":"node-1"},` +
	`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"podIP":"10.0.0.12"}}`
