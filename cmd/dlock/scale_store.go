package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockgo/dlock/internal/redisutil"
	"github.com/dlockgo/dlock/mysqllock"
	"github.com/dlockgo/dlock/natslock"
	"github.com/dlockgo/dlock/pglock"
)

// storeEntries returns a counter of what a backend's store holds, for
// the held sweep's growth and leftovers: files (a file:// directory named
// in the URL), keys (Redis, all nodes; etcd), rows of the token table
// (PostgreSQL, MySQL), znodes (ZooKeeper's mntr), messages of the
// bucket's stream (NATS); nil for other schemes. It counts the whole
// store: the sweep reports differences, which a busy store blurs.
func storeEntries(raw string) func(context.Context) (int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	if u.Scheme == "file" && u.Path != "" {
		return func(context.Context) (int, error) {
			es, err := os.ReadDir(u.Path)
			return len(es), err
		}
	}
	hosts := serverAddrs(raw)
	if len(hosts) == 0 {
		return nil
	}
	user := u.User.Username() // "" (and no password) for a URL without userinfo
	password, _ := u.User.Password()
	switch u.Scheme {
	case "redis", "redlock":
		return func(ctx context.Context) (int, error) { return redisutil.KeyCount(ctx, hosts, user, password) }
	case "postgres", "postgresql":
		table := cmp.Or(u.Query().Get("table"), pglock.DefaultTable)
		conn := *u
		conn.RawQuery = ""
		return func(ctx context.Context) (int, error) {
			c, err := pgx.Connect(ctx, conn.String())
			if err != nil {
				return 0, err
			}
			defer c.Close(context.Background())
			var n int
			err = c.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier(strings.Split(table, ".")).Sanitize()).Scan(&n)
			return n, err
		}
	case "mysql":
		table := cmp.Or(u.Query().Get("table"), mysqllock.DefaultTable)
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName = "tcp", hosts[0], strings.TrimPrefix(u.Path, "/")
		cfg.User, cfg.Passwd = user, password
		return func(ctx context.Context) (int, error) {
			db, err := sql.Open("mysql", cfg.FormatDSN())
			if err != nil {
				return 0, err
			}
			defer db.Close()
			quoted := "`" + strings.ReplaceAll(strings.ReplaceAll(table, "`", "``"), ".", "`.`") + "`"
			var n int
			err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoted).Scan(&n)
			return n, err
		}
	case "etcd":
		return func(ctx context.Context) (int, error) {
			c, err := clientv3.New(clientv3.Config{Endpoints: hosts, DialTimeout: 5 * time.Second, Context: ctx})
			if err != nil {
				return 0, err
			}
			defer c.Close()
			r, err := c.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(r.Count), nil
		}
	case "zk":
		return func(ctx context.Context) (int, error) { return zkZnodes(ctx, hosts[0]) }
	case "nats":
		bucket := cmp.Or(strings.Trim(u.Path, "/"), natslock.DefaultBucket)
		return func(ctx context.Context) (int, error) {
			nc, err := nats.Connect(strings.Join(hosts, ","), nats.UserInfo(user, password))
			if err != nil {
				return 0, err
			}
			defer nc.Close()
			js, err := nc.JetStream(nats.Context(ctx))
			if err != nil {
				return 0, err
			}
			si, err := js.StreamInfo("KV_"+bucket, nats.Context(ctx))
			if err != nil {
				return 0, err
			}
			return int(si.State.Msgs), nil
		}
	}
	return nil
}

// zkZnodes reads zk_znode_count from a ZooKeeper server's mntr command
// (which must be allowed by 4lw.commands.whitelist).
func zkZnodes(ctx context.Context, addr string) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("mntr")); err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "zk_znode_count"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("mntr on %s: no zk_znode_count (is mntr in 4lw.commands.whitelist?)", addr)
}
