package redisfence_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlockgo/dlock/fence"
	"github.com/dlockgo/dlock/fence/redisfence"
	"github.com/dlockgo/dlock/internal/testenv"
)

// Two holders of the lock on a daily report write it to Redis with their
// lease's token. The one that was paused past its TTL writes last but
// with the older token: its write is refused and the successor's report
// stays.
func ExampleSet() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Getenv("DLOCK_REDIS_ADDR", "127.0.0.1:6379")})
	defer rdb.Close()
	key := "dlock-example:report:" + rand.Text()[:8]
	defer rdb.Del(ctx, key)

	fmt.Println(redisfence.Set(ctx, rdb, key, "report by holder 12", 12))
	err := redisfence.Set(ctx, rdb, key, "report by holder 11", 11)
	if se, ok := errors.AsType[*fence.StaleError](err); ok {
		fmt.Printf("rejected token %d: token %d was already seen\n", se.Token, se.Highest)
	}
	value, token, err := redisfence.Get(ctx, rdb, key)
	fmt.Println(value, token, err)
	// Output:
	// <nil>
	// rejected token 11: token 12 was already seen
	// report by holder 12 12 <nil>
}
