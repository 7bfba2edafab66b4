package safety

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckLinear checks that a run's history is linearizable against a
// fenced lock: one register of who holds the lock, the last token
// granted and the highest token the resource accepted. Each acquisition
// becomes three operations, each with the real-time interval the client
// saw it in, and each write of the resource's log one, at the instant the
// resource decided on it:
//
//   - acquire, from the call to its return, granting Token: legal only
//     while nobody holds the lock and only with a token above every token
//     granted before;
//   - held, at the last instant the client's lease was seen held
//     (HeldAt; without it, just before LostAt, or at Exit when the client
//     was not told by then): legal only while the client holds the lock;
//   - free, from that instant until the release call returned: the lock
//     leaves the client somewhere in between (released, or expired);
//   - write: accepted only with a token at least the highest accepted
//     before, refused only below it.
//
// So the check fails on two clients told at once that they hold the lock,
// a token that does not increase in real-time order, and a guard decision
// that no fenced resource could make. Acquisitions without Released, and
// writes without At, are skipped. The check is exact but can be slow on
// long, highly concurrent histories: after timeout it reports
// porcupine.Unknown.
func CheckLinear(acqs []Acquisition, writes []Write, timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(fencedLock, linearHistory(acqs, writes), timeout)
}

// lockOp is the input of one operation on the fenced lock model.
type lockOp struct {
	kind   string // acquire, held, free, write
	client int
	token  uint64 // acquire: granted; write: carried
	ok     bool   // write: accepted
}

// lockState is the fenced lock model's state.
type lockState struct {
	holder  int // -1: free
	granted uint64
	fence   uint64
}

var fencedLock = porcupine.Model{
	Init: func() any { return lockState{holder: -1} },
	Step: func(state, input, _ any) (bool, any) {
		s, op := state.(lockState), input.(lockOp)
		switch op.kind {
		case "acquire":
			if s.holder != -1 || (op.token <= s.granted && s.granted != 0) {
				return false, s
			}
			s.holder, s.granted = op.client, op.token
		case "held":
			return s.holder == op.client, s
		case "free":
			if s.holder != op.client {
				return false, s
			}
			s.holder = -1
		case "write":
			if op.ok != (op.token >= s.fence) {
				return false, s
			}
			s.fence = max(s.fence, op.token)
		}
		return true, s
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(lockOp)
		return fmt.Sprintf("%s(client %d, token %d, ok %v)", op.kind, op.client, op.token, op.ok)
	},
}

// linearHistory turns acquisitions and writes into the model's
// operations.
func linearHistory(acqs []Acquisition, writes []Write) []porcupine.Operation {
	var h []porcupine.Operation
	for _, w := range writes {
		if w.At != 0 {
			op := lockOp{kind: "write", client: w.Client, token: w.Token, ok: w.Accepted}
			h = append(h, porcupine.Operation{ClientId: w.Client, Input: op, Call: w.At, Return: w.At})
		}
	}
	for _, a := range acqs {
		if a.Released == 0 {
			continue
		}
		held := a.heldUntil()
		op := func(kind string, call, ret int64) porcupine.Operation {
			return porcupine.Operation{ClientId: a.Client, Input: lockOp{kind: kind, client: a.Client, token: a.Token}, Call: call, Return: ret}
		}
		h = append(h, op("acquire", a.Call, a.Enter), op("held", held, held), op("free", held, max(held, a.Released)))
	}
	return h
}

// CheckLinearPermits checks that a semaphore's history is linearizable
// against a semaphore of limit permits: each acquisition is an acquire
// (legal only while fewer than limit clients hold a permit), a held at the
// last look that found the lease held (legal only while the client holds
// one) and a free, as in CheckLinear. Clients must be numbered 0 to 63.
func CheckLinearPermits(acqs []Acquisition, limit int, timeout time.Duration) porcupine.CheckResult {
	model := porcupine.Model{
		Init: func() any { return uint64(0) }, // the clients holding a permit
		Step: func(state, input, _ any) (bool, any) {
			held, op := state.(uint64), input.(lockOp)
			bit := uint64(1) << op.client
			switch op.kind {
			case "acquire":
				if held&bit != 0 || bits.OnesCount64(held) >= limit {
					return false, held
				}
				return true, held | bit
			case "held":
				return held&bit != 0, held
			default: // free
				return held&bit != 0, held &^ bit
			}
		},
	}
	return porcupine.CheckOperationsTimeout(model, linearHistory(acqs, nil), timeout)
}
