package fence

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The headers that carry fencing between an HTTP client and server.
const (
	// TokenHeader carries the client's fencing token, in decimal, on a
	// request; on a 409 Conflict answer from Middleware it carries the
	// rejected token.
	TokenHeader = "Dlock-Fencing-Token"
	// ResourceHeader optionally names the resource a request writes to.
	// Middleware uses it when no resource function is given.
	ResourceHeader = "Dlock-Fencing-Resource"
	// HighestHeader is set by Middleware on a 409 Conflict answer to the
	// highest token the server had seen for the resource.
	HighestHeader = "Dlock-Fencing-Highest"
)

// ErrNoToken is the cause of a 400 Bad Request from Middleware when a
// request carries no TokenHeader.
var ErrNoToken = errors.New("fence: request carries no " + TokenHeader + " header")

// SetToken sets req's TokenHeader to token.
func SetToken(req *http.Request, token uint64) {
	req.Header.Set(TokenHeader, strconv.FormatUint(token, 10))
}

// RequestToken reads req's fencing token. It returns an error wrapping
// ErrNoToken when the header is absent, ErrInvalidToken when it is 0, and
// a parse error when it is not a decimal uint64.
func RequestToken(req *http.Request) (uint64, error) {
	v := req.Header.Get(TokenHeader)
	if v == "" {
		return 0, ErrNoToken
	}
	tok, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: malformed %s header %q: %w", TokenHeader, v, err)
	}
	if tok == 0 {
		return 0, fmt.Errorf("%w (%s header)", ErrInvalidToken, TokenHeader)
	}
	return tok, nil
}

// Tokener is what LeaseToken needs of a lease: *dlock.Lease has it.
// (Package fence does not import dlock, so that resource servers that
// only check tokens need none of the lock clients.)
type Tokener interface{ Token() uint64 }

// LeaseToken returns a Transport.Token function that sends lease's token
// with every request.
func LeaseToken(lease Tokener) func(*http.Request) uint64 {
	return func(*http.Request) uint64 { return lease.Token() }
}

// Transport is an http.RoundTripper that adds a fencing token (and
// optionally a resource name) to every request it sends. A Transport is
// safe for concurrent use when its functions are.
type Transport struct {
	// Base sends the requests; http.DefaultTransport when nil.
	Base http.RoundTripper
	// Token returns the token for a request; 0 leaves the request
	// without a TokenHeader (and a server running Middleware answers 400).
	Token func(*http.Request) uint64
	// Resource, when not nil, returns the ResourceHeader value for a
	// request; "" leaves it unset.
	Resource func(*http.Request) string
}

// RoundTrip sends a copy of req with the fencing headers set: a
// RoundTripper must not modify the caller's request.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := cmp.Or(t.Base, http.DefaultTransport)
	var tok uint64
	if t.Token != nil {
		tok = t.Token(req)
	}
	var res string
	if t.Resource != nil {
		res = t.Resource(req)
	}
	if tok == 0 && res == "" {
		return base.RoundTrip(req)
	}
	r2 := req.Clone(req.Context())
	if tok != 0 {
		SetToken(r2, tok)
	}
	if res != "" {
		r2.Header.Set(ResourceHeader, res)
	}
	return base.RoundTrip(r2)
}

// ResponseError returns a *StaleError when resp is Middleware's 409
// Conflict answer to a stale token (resource and both tokens are read
// from the response's headers), and nil for any other response. The
// caller still owns resp.Body.
func ResponseError(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	high, err := strconv.ParseUint(resp.Header.Get(HighestHeader), 10, 64)
	if err != nil {
		return nil // a 409 for some other reason than fencing
	}
	tok, _ := strconv.ParseUint(resp.Header.Get(TokenHeader), 10, 64)
	return &StaleError{Resource: resp.Header.Get(ResourceHeader), Token: tok, Highest: high}
}

// RejectFunc writes the answer to a request Middleware does not pass on.
// status is the code Middleware would use: 400 Bad Request for a
// missing, malformed or zero token (err wraps ErrNoToken or
// ErrInvalidToken, or is a parse error), 409 Conflict for a stale one
// (err is a *StaleError), 500 Internal Server Error when the guard itself
// failed (err is the guard's error).
type RejectFunc func(w http.ResponseWriter, r *http.Request, status int, err error)

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

// OnReject replaces the default answer to rejected requests (see
// DefaultReject).
func OnReject(f RejectFunc) MiddlewareOption {
	return func(m *middleware) { m.reject = f }
}

type middleware struct {
	g        Guard
	resource func(*http.Request) string
	reject   RejectFunc
}

// Middleware returns HTTP middleware that admits each request's fencing
// token (TokenHeader) with g before calling the next handler, so that a
// holder whose lock has passed to another client cannot write through
// this server any more. resource names the resource a request writes to;
// when it is nil, the request's ResourceHeader is used, and the URL path
// when that is empty. Rejected requests never reach the next handler;
// they get DefaultReject's answer unless OnReject says otherwise.
//
// The check is not atomic with the handler's write: a request admitted
// with token 5 may still be writing when one with token 6 is admitted.
// Where two holders' writes must not interleave, the handler should write
// through a guard that checks in the same atomic step (a pgfence
// transaction, a redisfence.Set), with the token RequestToken reads.
func Middleware(g Guard, resource func(*http.Request) string, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{g: g, resource: resource, reject: DefaultReject}
	for _, o := range opts {
		o(m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if status, err := m.admit(r); err != nil {
				m.reject(w, r, status, err)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// admit checks r's token; it returns the status code to answer with when
// the request must not go on.
func (m *middleware) admit(r *http.Request) (int, error) {
	tok, err := RequestToken(r)
	if err != nil {
		return http.StatusBadRequest, err
	}
	var res string
	if m.resource != nil {
		res = m.resource(r)
	} else if res = r.Header.Get(ResourceHeader); res == "" {
		res = r.URL.Path
	}
	err = m.g.Admit(r.Context(), res, tok)
	switch {
	case err == nil:
		return 0, nil
	case errors.Is(err, ErrStale):
		return http.StatusConflict, err
	case errors.Is(err, ErrInvalidToken):
		return http.StatusBadRequest, err
	default:
		return http.StatusInternalServerError, err
	}
}

// DefaultReject answers a rejected request with status and err's message
// as a plain-text body; for a 500 it writes only the status text, so that
// the guard's internals (a database error, say) do not reach clients. A
// 409 for a *StaleError also carries the resource, the rejected token and
// the highest one in ResourceHeader, TokenHeader and HighestHeader, which
// ResponseError reads back.
func DefaultReject(w http.ResponseWriter, _ *http.Request, status int, err error) {
	h := w.Header()
	if se, ok := errors.AsType[*StaleError](err); ok && status == http.StatusConflict {
		h.Set(ResourceHeader, se.Resource)
		h.Set(TokenHeader, strconv.FormatUint(se.Token, 10))
		h.Set(HighestHeader, strconv.FormatUint(se.Highest, 10))
	}
	msg := err.Error()
	if status >= 500 {
		msg = http.StatusText(status)
	}
	http.Error(w, msg, status)
}
