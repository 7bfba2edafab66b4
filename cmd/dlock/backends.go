package main

// Every backend registers its URL scheme when imported, so that
// --backend accepts them all.
import (
	_ "github.com/dlockgo/dlock/etcdlock"
	_ "github.com/dlockgo/dlock/filelock"
	_ "github.com/dlockgo/dlock/memlock"
	_ "github.com/dlockgo/dlock/mysqllock"
	_ "github.com/dlockgo/dlock/natslock"
	_ "github.com/dlockgo/dlock/pglock"
	_ "github.com/dlockgo/dlock/redislock"
	_ "github.com/dlockgo/dlock/redlock"
	_ "github.com/dlockgo/dlock/zklock"
)
