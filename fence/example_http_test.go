package fence_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/dlockgo/dlock/fence"
)

// lease stands for a *dlock.Lease: anything with a Token method.
type lease uint64

func (l lease) Token() uint64 { return uint64(l) }

// A storage service behind fence.Middleware, and two clients whose
// requests carry their lease's token: the holder that lost its lock is
// turned away with 409 Conflict once its successor has written.
func ExampleMiddleware() {
	var guard fence.Memory
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "stored")
	})
	srv := httptest.NewServer(fence.Middleware(&guard, nil)(store))
	defer srv.Close()

	send := func(l lease) {
		client := &http.Client{Transport: &fence.Transport{Token: fence.LeaseToken(l)}}
		resp, err := client.Post(srv.URL+"/reports/daily", "text/plain", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("token %d: %d %s", l, resp.StatusCode, body)
		if err := fence.ResponseError(resp); err != nil {
			fmt.Println("client sees:", err)
		} else {
			fmt.Println()
		}
	}
	send(lease(34)) // the successor writes
	send(lease(33)) // the paused holder wakes up
	// Output:
	// token 34: 200 stored
	// token 33: 409 fence: stale token 33 for "/reports/daily": token 34 was already seen
	// client sees: fence: stale token 33 for "/reports/daily": token 34 was already seen
}
