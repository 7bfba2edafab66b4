package fence

import (
	"context"
	"errors"
	"fmt"
)

// ErrStale is matched (errors.Is) by the error a guard returns when it
// rejects a token lower than the highest it has seen for the resource.
var ErrStale = errors.New("fence: stale token")

// StaleError reports a rejected token and the token that made it stale.
// errors.Is(err, ErrStale) is true for it.
type StaleError struct {
	// Resource is what the guard protects, as the caller named it.
	Resource string
	// Token is the rejected token.
	Token uint64
	// Highest is the highest token the guard had seen for Resource.
	Highest uint64
}

// Error names the resource and both tokens.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: token %d was already seen", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// A Guard admits operations on named resources by fencing token.
//
// Admit accepts token for resource when it is at least the highest token
// admitted for that resource before, and records it as the new highest;
// otherwise it returns a *StaleError and records nothing. The check and
// the record are one atomic step: of two concurrent calls with different
// tokens, the lower is admitted only if it came first. Equal tokens are
// admitted (one holder may write several times under one lease); token 0,
// which dlock never grants, is rejected as invalid.
type Guard interface {
	Admit(ctx context.Context, resource string, token uint64) error
}

// ErrInvalidToken is returned for token 0, which no lease carries: it
// usually means a token was not passed along.
var ErrInvalidToken = errors.New("fence: token 0 is not a fencing token")
