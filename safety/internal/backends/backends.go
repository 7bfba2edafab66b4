// Package backends, imported for its side effect, registers the URL
// scheme of every backend the safety suite runs against, for its client
// processes and its in-process clients.
package backends

import (
	_ "github.com/dlockgo/dlock/etcdlock"
	_ "github.com/dlockgo/dlock/filelock"
	_ "github.com/dlockgo/dlock/mysqllock"
	_ "github.com/dlockgo/dlock/natslock"
	_ "github.com/dlockgo/dlock/pglock"
	_ "github.com/dlockgo/dlock/redislock"
	_ "github.com/dlockgo/dlock/redlock"
	_ "github.com/dlockgo/dlock/zklock"
)
