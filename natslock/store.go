package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The requests the driver makes, each one round trip. Writes are
// publishes to the key's subject with the headers the server checks, not
// the KV API's Create, Update and Purge (docs/NATS.md, "Why not the KV
// API", says why).

// KV headers, as nats.go's KV writes them, so that KV clients (the nats
// CLI, a watcher of the bucket) read the driver's markers as deletions.
const (
	kvOperationHeader = "KV-Operation"
	kvPurge           = "PURGE"
	rollupHeader      = "Nats-Rollup"
	rollupSubject     = "sub"
)

// reqCtx bounds one request by the driver's request timeout, within ctx.
func (d *Driver) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d.reqTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.reqTimeout)
}

// put writes data to key with a per-key TTL ttl, only if the key's last
// revision is expect (0: no message at all; a marker's for an
// acquisition, the holder's for a renewal), and returns the new revision.
func (d *Driver) put(ctx context.Context, key string, data []byte, ttl time.Duration, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: d.subjects + key, Data: data, Header: nats.Header{
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(expect, 10)},
		jetstream.MsgTTLHeader:              {strconv.FormatInt(int64(ttl/time.Second), 10)},
	}}
	return d.publish(ctx, m)
}

// purge writes a purge marker, which removes the key's earlier messages
// and expires after the marker TTL, on key, only if its last revision is
// expect, and returns the marker's revision.
func (d *Driver) purge(ctx context.Context, key string, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: d.subjects + key, Header: nats.Header{
		kvOperationHeader:                   {kvPurge},
		rollupHeader:                        {rollupSubject},
		jetstream.ExpectedLastSubjSeqHeader: {strconv.FormatUint(expect, 10)},
		jetstream.MsgTTLHeader:              {d.markerTTL},
	}}
	return d.publish(ctx, m)
}

func (d *Driver) publish(ctx context.Context, m *nats.Msg) (uint64, error) {
	rctx, cancel := d.reqCtx(ctx)
	defer cancel()
	ack, err := d.js.PublishMsg(rctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// entry is the last message of a key, as get reads it.
type entry struct {
	found  bool // the key has a message
	marker bool // and it is a deletion, a purge or an expiry marker
	rev    uint64
	rec    record // when it holds a lock
	held   bool   // rec was read
	time   time.Time
}

// msgGetResponse is the stream leader's answer to a message get.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// get reads the last message of key from the bucket stream's leader,
// which orders every write and so has every acknowledged one: a message
// get of the JetStream API, not a direct get, which any replica answers,
// possibly before it has such a write (a holder's Leader would then not
// show it leading, and a free lock would look held).
func (d *Driver) get(ctx context.Context, key string) (entry, error) {
	rctx, cancel := d.reqCtx(ctx)
	defer cancel()
	req := make([]byte, 0, 32+len(d.subjects)+len(key))
	req = append(req, `{"last_by_subj":"`...)
	req = append(req, d.subjects...) // subjects and keys need no JSON escaping
	req = append(req, key...)
	req = append(req, `"}`...)
	m, err := d.js.Conn().RequestWithContext(rctx, d.msgGet, req)
	if err != nil {
		return entry{}, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return entry{}, fmt.Errorf("message get of %s: %w", key, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return entry{}, nil
		}
		return entry{}, resp.Error
	}
	if resp.Message == nil {
		return entry{}, fmt.Errorf("message get of %s: %w", key, jetstream.ErrInvalidJetStreamResponse)
	}
	msg := resp.Message
	e := entry{found: true, rev: msg.Sequence, time: msg.Time}
	if len(msg.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(msg.Header)
		if err != nil {
			return entry{}, fmt.Errorf("message get of %s: %w", key, err)
		}
		if h.Get(kvOperationHeader) != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
			e.marker = true
			return e, nil
		}
	}
	e.rec, e.held = parseRecord(msg.Data)
	return e, nil
}

// ownedBy reports whether e holds owner's lock.
func (e entry) ownedBy(owner string) bool { return e.held && e.rec.owner == owner }

// token is the fencing token of the lock e holds: its record's, or, in
// the message that took the lock, its revision.
func (e entry) token() uint64 {
	if e.rec.token == 0 {
		return e.rev
	}
	return e.rec.token
}

// fromKV is what a watch reports of a key.
func fromKV(e jetstream.KeyValueEntry) entry {
	out := entry{found: true, rev: e.Revision(), time: e.Created()}
	if e.Operation() != jetstream.KeyValuePut {
		out.marker = true
		return out
	}
	out.rec, out.held = parseRecord(e.Value())
	return out
}

// wrongRevision reports whether err is the server's refusal of a write
// whose expected last revision did not match: nothing was written.
// Replicated streams report it with a code of their own.
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// refused reports whether err means the server, or the client before
// sending, refused a request, so that the write wrote nothing; any other
// error (a timeout, a connection lost) leaves the outcome unknown.
func refused(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders)
}
