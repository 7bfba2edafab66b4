package fence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlockgo/dlock/fence"
)

// fencedServer serves a handler behind fence.Middleware with g, counting
// the calls that reach it.
func fencedServer(t *testing.T, g fence.Guard, opts ...fence.MiddlewareOption) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.WriteString(w, "written")
	})
	srv := httptest.NewServer(fence.Middleware(g, nil, opts...)(h))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// put sends a PUT to url with the given token header value ("" for none).
func put(t *testing.T, url, token string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(fence.TokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestMiddlewareStaleGets409(t *testing.T) {
	srv, calls := fencedServer(t, new(fence.Memory))
	url := srv.URL + "/orders/42"
	for _, tok := range []string{"7", "7", "8"} { // current, equal, newer
		if resp, body := put(t, url, tok); resp.StatusCode != http.StatusOK {
			t.Fatalf("token %s: %d %q, want 200", tok, resp.StatusCode, body)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler called %d times, want 3", n)
	}
	resp, body := put(t, url, "7")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("stale token 7 after 8: %d %q, want 409", resp.StatusCode, body)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler called for a stale token (%d calls)", n)
	}
	if !strings.Contains(body, "7") || !strings.Contains(body, "8") {
		t.Fatalf("409 body %q does not name both tokens", body)
	}
	err := fence.ResponseError(resp)
	se, ok := errors.AsType[*fence.StaleError](err)
	if !ok || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("ResponseError(409) = %v, want a *StaleError", err)
	}
	want := fence.StaleError{Resource: "/orders/42", Token: 7, Highest: 8}
	if *se != want {
		t.Fatalf("ResponseError = %+v, want %+v", *se, want)
	}
	// Resources are fenced separately: the URL path names them here.
	if resp, _ := put(t, srv.URL+"/orders/43", "1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("token 1 on another resource: %d, want 200", resp.StatusCode)
	}
}

func TestMiddlewareBadTokenGets400(t *testing.T) {
	srv, calls := fencedServer(t, new(fence.Memory))
	for _, tok := range []string{"", "0", "-3", "abc", "18446744073709551616"} {
		resp, body := put(t, srv.URL+"/r", tok)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("token %q: %d %q, want 400", tok, resp.StatusCode, body)
		}
		if fence.ResponseError(resp) != nil {
			t.Errorf("token %q: ResponseError of a 400 is not nil", tok)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler called %d times for bad tokens", n)
	}
	if resp, _ := put(t, srv.URL+"/r", "18446744073709551615"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the largest uint64 token: %d, want 200", resp.StatusCode)
	}
}

func TestRequestToken(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if _, err := fence.RequestToken(req); !errors.Is(err, fence.ErrNoToken) {
		t.Fatalf("no header: %v, want ErrNoToken", err)
	}
	fence.SetToken(req, 0)
	if _, err := fence.RequestToken(req); !errors.Is(err, fence.ErrInvalidToken) {
		t.Fatalf("token 0: %v, want ErrInvalidToken", err)
	}
	fence.SetToken(req, 123456789012)
	if tok, err := fence.RequestToken(req); err != nil || tok != 123456789012 {
		t.Fatalf("RequestToken = %d, %v; want 123456789012", tok, err)
	}
}

// failingGuard is a guard whose store is down.
type failingGuard struct{}

func (failingGuard) Admit(context.Context, string, uint64) error {
	return errors.New("connection refused to secret-host:5432")
}

func TestMiddlewareGuardFailure(t *testing.T) {
	srv, calls := fencedServer(t, failingGuard{})
	resp, body := put(t, srv.URL+"/r", "5")
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("guard failure: %d, want 500", resp.StatusCode)
	}
	if strings.Contains(body, "secret-host") {
		t.Fatalf("500 body %q leaks the guard's error", body)
	}
	if calls.Load() != 0 {
		t.Fatal("handler called although the guard failed")
	}
}

func TestMiddlewareOnReject(t *testing.T) {
	var got []int
	var mu sync.Mutex
	srv, _ := fencedServer(t, new(fence.Memory), fence.OnReject(func(w http.ResponseWriter, r *http.Request, status int, err error) {
		mu.Lock()
		got = append(got, status)
		mu.Unlock()
		w.WriteHeader(http.StatusPreconditionFailed)
	}))
	put(t, srv.URL+"/r", "9")
	if resp, _ := put(t, srv.URL+"/r", "8"); resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("custom reject: %d, want 412", resp.StatusCode)
	}
	if resp, _ := put(t, srv.URL+"/r", ""); resp.StatusCode != http.StatusPreconditionFailed {
		t.Fatalf("custom reject: %d, want 412", resp.StatusCode)
	}
	if len(got) != 2 || got[0] != http.StatusConflict || got[1] != http.StatusBadRequest {
		t.Fatalf("RejectFunc saw statuses %v, want [409 400]", got)
	}
}

func TestMiddlewareResourceFunc(t *testing.T) {
	var g fence.Memory
	h := fence.Middleware(&g, func(r *http.Request) string { return "account:" + r.URL.Query().Get("id") })(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	put(t, srv.URL+"/a?id=1", "4")
	if g.Highest("account:1") != 4 {
		t.Fatalf("the resource function's name was not used: Highest(account:1) = %d", g.Highest("account:1"))
	}
	// Without a resource function, the client's ResourceHeader names it.
	var g2 fence.Memory
	srv2, _ := fencedServer(t, &g2)
	client := &http.Client{Transport: &fence.Transport{
		Token:    func(*http.Request) uint64 { return 6 },
		Resource: func(*http.Request) string { return "inventory" },
	}}
	resp, err := client.Get(srv2.URL + "/whatever")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if g2.Highest("inventory") != 6 {
		t.Fatalf("ResourceHeader not used: Highest(inventory) = %d", g2.Highest("inventory"))
	}
}

func TestTransportLeavesRequestAlone(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get(fence.TokenHeader))
	}))
	defer srv.Close()
	var tok uint64 = 11
	client := &http.Client{Transport: &fence.Transport{Token: func(*http.Request) uint64 { return tok }}}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Header.Get(fence.TokenHeader) != "" {
		t.Fatal("Transport modified the caller's request")
	}
	tok = 0 // no token: no header
	resp, err = client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(seen) != 2 || seen[0] != "11" || seen[1] != "" {
		t.Fatalf("server saw token headers %q, want [11 \"\"]", seen)
	}
}

// orderedGuard records, in admission order, the tokens its Memory admits.
type orderedGuard struct {
	mu       sync.Mutex
	m        fence.Memory
	admitted []uint64
}

func (g *orderedGuard) Admit(ctx context.Context, res string, tok uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.m.Admit(ctx, res, tok)
	if err == nil {
		g.admitted = append(g.admitted, tok)
	}
	return err
}

// TestMiddlewareConcurrent sends requests with increasing tokens from
// racing clients: every request is either passed on or answered 409 with
// a higher token, admissions never go back, and the last token wins.
func TestMiddlewareConcurrent(t *testing.T) {
	g := &orderedGuard{}
	srv, calls := fencedServer(t, g)
	var next atomic.Uint64
	client := &http.Client{Transport: &fence.Transport{Token: func(*http.Request) uint64 { return next.Add(1) }}}
	const clients, each = 8, 50
	var ok, stale atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				resp, err := client.Post(srv.URL+"/r", "text/plain", nil)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusConflict:
					se, isStale := errors.AsType[*fence.StaleError](fence.ResponseError(resp))
					if !isStale || se.Highest <= se.Token {
						t.Errorf("409 without a higher token: %v", fence.ResponseError(resp))
					}
					stale.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load()+stale.Load() != clients*each || ok.Load() != calls.Load() {
		t.Fatalf("%d passed + %d stale != %d requests, or %d handler calls", ok.Load(), stale.Load(), clients*each, calls.Load())
	}
	for i := 1; i < len(g.admitted); i++ {
		if g.admitted[i] < g.admitted[i-1] {
			t.Fatalf("token %d admitted after %d", g.admitted[i], g.admitted[i-1])
		}
	}
	if h := g.m.Highest("/r"); h != clients*each {
		t.Fatalf("Highest = %d, want the last token %d", h, clients*each)
	}
	t.Logf("%d passed, %d stale", ok.Load(), stale.Load())
}

func BenchmarkMiddleware(b *testing.B) {
	h := fence.Middleware(new(fence.Memory), nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodPut, "/r", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for i := uint64(1); b.Loop(); i++ {
		req.Header.Set(fence.TokenHeader, strconv.FormatUint(i, 10))
		h.ServeHTTP(w, req)
	}
	if w.Code != http.StatusOK {
		b.Fatal(w.Code)
	}
}

func BenchmarkMemoryAdmit(b *testing.B) {
	var g fence.Memory
	ctx := context.Background()
	b.ReportAllocs()
	for i := uint64(1); b.Loop(); i++ {
		if err := g.Admit(ctx, "r", i); err != nil {
			b.Fatal(err)
		}
	}
}
