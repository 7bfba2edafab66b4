package redislock

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// nilClient is never used: key tests need a driver, not a server.
var nilClient = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster maps keys to slots
// with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is Redis Cluster's slot of key: the hash of its tag (the text
// between the first "{" and the next "}", if not empty) or of the key.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func TestCRC16(t *testing.T) {
	// The check value of CRC-16/XMODEM, and the example of the Redis
	// Cluster specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", got)
	}
}

func TestKeysShareSlot(t *testing.T) {
	d := NewDriver(nilClient, &Options{Prefix: "app:"})
	names := []string{"a", "orders/42", "x.y-z_w:v@u+t=s", strings.Repeat("n", 200)}
	slots := map[uint16]bool{}
	for _, name := range names {
		k := d.keys(name)
		want := []string{"app:{" + name + "}", "app:{" + name + "}:fence", "app:{" + name + "}:q", "app:{" + name + "}:qe"}
		for i := range want {
			if k[i] != want[i] {
				t.Errorf("key %d of %q: %q, want %q", i, name, k[i], want[i])
			}
		}
		slot := keySlot(k[0])
		for _, key := range k[1:] {
			if s := keySlot(key); s != slot {
				t.Errorf("%q in slot %d, %q in slot %d", key, s, k[0], slot)
			}
		}
		if slot != crc16(name)%16384 {
			t.Errorf("%q: slot %d is not the slot of the name", k[0], slot)
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		t.Errorf("every name in one slot: locks would not spread over a cluster")
	}
}

func TestKeysAllocations(t *testing.T) {
	d := NewDriver(nilClient, nil)
	n := testing.AllocsPerRun(100, func() { _ = d.keys("orders/42") })
	if n > 2 {
		t.Errorf("keys: %v allocations, want at most 2", n)
	}
}
