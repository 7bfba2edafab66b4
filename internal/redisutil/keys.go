package redisutil

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// KeyCount returns how many keys the Redis servers at addrs hold
// together: the sum of their DBSIZE, each asked over a client of its own
// (authenticated as username with password when username or password is
// set) that is closed before the next. dlock bench --scale and the bench
// module's scale command count a store's entries with it.
func KeyCount(ctx context.Context, addrs []string, username, password string) (int, error) {
	n := 0
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Username: username, Password: password})
		k, err := c.DBSize(ctx).Result()
		_ = c.Close()
		if err != nil {
			return 0, err
		}
		n += int(k)
	}
	return n, nil
}
