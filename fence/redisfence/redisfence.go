package redisfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/fence"
)

var (
	//go:embed set.lua
	setLua    string
	setScript = redis.NewScript(setLua)

	//go:embed admit.lua
	admitLua    string
	admitScript = redis.NewScript(admitLua)
)

// The hash fields of a fenced key.
const (
	// ValueField holds the value Set wrote.
	ValueField = "value"
	// TokenField holds the highest token admitted, in decimal.
	TokenField = "token"
)

// Set writes value to key with token when token is at least the highest
// token key has seen, and records token; otherwise it returns a
// *fence.StaleError and leaves key as it was. value is encoded as go-redis
// encodes command arguments (string, []byte, numbers,
// encoding.BinaryMarshaler). Token 0 gives fence.ErrInvalidToken.
func Set(ctx context.Context, c redis.Scripter, key string, value any, token uint64) error {
	return run(ctx, setScript, c, key, token, value)
}

// Admit records token as key's highest when it is at least the highest
// recorded, and otherwise returns a *fence.StaleError. It does not touch
// the value Set stores in key.
func Admit(ctx context.Context, c redis.Scripter, key string, token uint64) error {
	return run(ctx, admitScript, c, key, token)
}

func run(ctx context.Context, s *redis.Script, c redis.Scripter, key string, token uint64, value ...any) error {
	if token == 0 {
		return fmt.Errorf("%w (key %q)", fence.ErrInvalidToken, key)
	}
	res, err := s.Run(ctx, c, []string{key}, append([]any{strconv.FormatUint(token, 10)}, value...)...).Result()
	if err != nil {
		return fmt.Errorf("redisfence: token %d for %q: %w", token, key, err)
	}
	switch r := res.(type) {
	case int64:
		return nil
	case string:
		high, err := strconv.ParseUint(r, 10, 64)
		if err != nil {
			return fmt.Errorf("redisfence: %q holds a malformed token %q", key, r)
		}
		return &fence.StaleError{Resource: key, Token: token, Highest: high}
	default:
		return fmt.Errorf("redisfence: unexpected script reply %T %v", res, res)
	}
}

// Get returns the value Set last wrote to key and the highest token key
// has seen. err is redis.Nil when key holds no value (token may still be
// set by Admit).
func Get(ctx context.Context, c redis.Cmdable, key string) (value string, token uint64, err error) {
	vals, err := c.HMGet(ctx, key, ValueField, TokenField).Result()
	if err != nil {
		return "", 0, fmt.Errorf("redisfence: get %q: %w", key, err)
	}
	if s, ok := vals[1].(string); ok {
		if token, err = strconv.ParseUint(s, 10, 64); err != nil {
			return "", 0, fmt.Errorf("redisfence: %q holds a malformed token %q", key, s)
		}
	}
	value, ok := vals[0].(string)
	if !ok {
		return "", token, redis.Nil
	}
	return value, token, nil
}

// Guard is a fence.Guard whose tokens live in Redis: Admit(resource)
// records the token in the key Prefix+resource (see Admit). It holds no
// state of its own; copy it freely.
type Guard struct {
	// Client runs the scripts: a *redis.Client, *redis.ClusterClient or
	// any redis.UniversalClient.
	Client redis.Scripter
	// Prefix is prepended to resource names to make keys.
	Prefix string
}

// Admit implements fence.Guard.
func (g Guard) Admit(ctx context.Context, resource string, token uint64) error {
	err := Admit(ctx, g.Client, g.Prefix+resource, token)
	if se, ok := errors.AsType[*fence.StaleError](err); ok {
		se.Resource = resource
	}
	return err
}

var _ fence.Guard = Guard{}
