package fleet

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An engaged cluster's answers are bounded (Options.MaxResponseBytes): a
// server sending a list without end fails the read past the bound instead
// of filling the process's memory; an answer of exactly the bound reads
// whole, and a watch's stream is not bounded as one answer.
func TestSwapTransport_boundsEveryAnswerButAWatch(t *testing.T) {
	const bound = 1 << 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 2 * bound
		if r.URL.Query().Get("exact") != "" {
			n = bound
		}
		_, _ = io.WriteString(w, strings.Repeat("x", n))
	}))
	defer srv.Close()
	hc := &http.Client{Transport: newSwapTransport(http.DefaultTransport, bound)}
	defer hc.CloseIdleConnections()
	read := func(query string) (int, error) {
		resp, err := hc.Get(srv.URL + "/api/v1/configmaps?" + query)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}
	if n, err := read("limit=500"); err == nil || !strings.Contains(err.Error(), "more than 1048576 bytes") || n > bound {
		t.Errorf("an answer of twice the bound: read %d bytes, %v; want at most %d and an error naming the bound", n, err, bound)
	}
	if n, err := read("exact=1"); err != nil || n != bound {
		t.Errorf("an answer of exactly the bound: read %d bytes, %v; want all of it", n, err)
	}
	if n, err := read("watch=true"); err != nil || n != 2*bound {
		t.Errorf("a watch's stream: read %d bytes, %v; want all of it", n, err)
	}
	unbounded := &http.Client{Transport: newSwapTransport(http.DefaultTransport, 0)}
	defer unbounded.CloseIdleConnections()
	resp, err := unbounded.Get(srv.URL + "/api/v1/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 2*bound {
		t.Errorf("without a bound: read %d bytes, %v; want all of it", len(b), err)
	}
}
