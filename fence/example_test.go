package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockgo/dlock/fence"
)

// A holder paused past its lock's TTL comes back with an old token; the
// guard rejects its write because a later holder has written since.
func ExampleMemory() {
	var guard fence.Memory
	ctx := context.Background()
	stock := 10

	sell := func(token uint64) error {
		return guard.Do(ctx, "stock", token, func() error {
			stock--
			return nil
		})
	}

	fmt.Println(sell(41)) // the successor, token 41, sells one
	err := sell(40)       // the paused holder wakes up with token 40
	fmt.Println(errors.Is(err, fence.ErrStale))
	fmt.Println(err)
	fmt.Println("stock:", stock)
	// Output:
	// <nil>
	// true
	// fence: stale token 40 for "stock": token 41 was already seen
	// stock: 9
}
