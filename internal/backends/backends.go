// Package backends, imported for its side effect, registers the URL
// scheme of every backend of the module: for the dlock command's
// --backend, and for the safety suite's client processes and in-process
// clients.
package backends

import (
	_ "github.com/dlockgo/dlock/azurelock"
	_ "github.com/dlockgo/dlock/etcdlock"
	_ "github.com/dlockgo/dlock/filelock"
	_ "github.com/dlockgo/dlock/gcslock"
	_ "github.com/dlockgo/dlock/memlock"
	_ "github.com/dlockgo/dlock/mysqllock"
	_ "github.com/dlockgo/dlock/natslock"
	_ "github.com/dlockgo/dlock/pglock"
	_ "github.com/dlockgo/dlock/redislock"
	_ "github.com/dlockgo/dlock/redlock"
	_ "github.com/dlockgo/dlock/s3lock"
	_ "github.com/dlockgo/dlock/zklock"
)
