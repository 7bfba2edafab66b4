//go:build race

package etcdlock_test

func init() { raceEnabled = true }
