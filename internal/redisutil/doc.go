// Package redisutil holds what the two Redis backends (redislock,
// redlock) share beyond go-redis itself: reading the server settings that
// bear on a lock's safety (EvictionPolicy), listing lock names and reading
// their holders for Inspect (ScanNames, ReadHolder), checking a URL's
// server list (HostList), and their scripts
// (Script); and what the scale sweeps of dlock bench --scale and the bench
// module share: counting a store's keys (KeyCount).
package redisutil
