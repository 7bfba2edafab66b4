//go:build race

package main

// raceEnabled makes TestMain build the binary with the race detector too,
// so that the end-to-end tests check dlock's own goroutines.
const raceEnabled = true
