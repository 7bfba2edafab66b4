// Package redisutil holds what the two Redis backends (redislock,
// redlock) share beyond go-redis itself: reading the server settings that
// bear on a lock's safety (EvictionPolicy), listing lock names for
// Inspect (ScanNames) and checking a URL's server list (HostList).
package redisutil
