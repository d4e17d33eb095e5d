package program

import "testing"

func TestNameOf_isADNSLabelOfTheFileName(t *testing.T) {
	for path, want := range map[string]string{
		"/usr/local/bin/website":    "website",
		"./My_Operator.test":        "my-operator-test",
		"/tmp/go-build123/b001/exe": "exe",
		"/":                         "ctrlkit",
		"__":                        "ctrlkit",
		"/bin/" + "a234567890b234567890c234567890d234567890e": "a234567890b234567890c234567890d234567890",
		"/bin/" + "a234567890b234567890c234567890d23456789_e": "a234567890b234567890c234567890d23456789",
	} {
		if got := nameOf(path); got != want {
			t.Errorf("nameOf(%q) = %q, want %q", path, got, want)
		}
	}
}
