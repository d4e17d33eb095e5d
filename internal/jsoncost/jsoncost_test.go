package jsoncost_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/internal/jsoncost"
)

func TestEstimate_chargesValuesAndMembersOutsideStringsAndFieldsV1(t *testing.T) {
	const v, m = jsoncost.PerValue, jsoncost.PerMember
	for _, c := range []struct {
		doc   string
		extra int64 // beyond its bytes
	}{
		{``, 0},
		{`"a"`, 0},
		{`{}`, v},
		{`[{},{}]`, 2 * v},                 // two elements; their objects are the elements
		{`[null,0,"",[]]`, 4 * v},          // an element costs a value whatever it holds
		{`{"a":1,"b":[1,2]}`, v + m + 2*v}, // an object, a second member, two elements
		{`{"a":"{[,]}"}`, v},               // braces in a string cost nothing
		{`{"a":"\"{,"}`, v},                // nor after an escaped quote
		{`{"a":"\\","b":1}`, v + m},        // an escaped backslash ends no string
		{`{"fieldsV1":{"f:a":{},"f:b":{"x":[{}]}},"c":2}`, v + m}, // fieldsV1's objects are raw bytes
		{`{"fieldsV1":"x","d":{}}`, v + m + v},                    // a fieldsV1 that is not an object
		{`[[[[[]]]]]`, 4 * v},                                     // nested arrays: each but the outermost an element
		{`[{},{},{}]`, 3 * v},
	} {
		if got, want := jsoncost.Estimate([]byte(c.doc)), int64(len(c.doc))+c.extra; got != want {
			t.Errorf("Estimate(%s) = %d, want %d", c.doc, got, want)
		}
		if est, most := jsoncost.Estimate([]byte(c.doc)), jsoncost.MaxEstimate(len(c.doc)); est > most {
			t.Errorf("Estimate(%s) = %d, more than MaxEstimate's %d", c.doc, est, most)
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
		{"null containers", `{"spec":{"containers":[` + strings.Repeat(`null,`, 20_000) + `null]}}`},
		{"containers as numbers", `{"spec":{"containers":[` + strings.Repeat(`0,`, 20_000) + `0]}}`},
		{"a realistic pod", realisticPod},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var pod corev1.Pod
			_ = json.Unmarshal([]byte(c.doc), &pod) // numbers for containers fail, once the slice is made
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
