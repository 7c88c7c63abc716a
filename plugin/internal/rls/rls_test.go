package rls

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// fields parses one protobuf message level into number → raw values.
func fields(t *testing.T, b []byte) map[protowire.Number][][]byte {
	t.Helper()
	out := map[protowire.Number][][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag")
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			t.Fatalf("bad field %d", num)
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(b)
		}
		out[num] = append(out[num], v)
		b = b[m:]
	}
	return out
}

func varint(t *testing.T, b []byte) uint64 {
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		t.Fatal("bad varint")
	}
	return v
}

func TestAppendFrame(t *testing.T) {
	r := &Request{Domain: "sluice", Entries: []Entry{{"rule", "api"}, {"key", "0123abcd"}}, Limit: 100, Unit: UnitMinute, Hits: 7}
	b := AppendFrame([]byte("xx"), r)
	if string(b[:2]) != "xx" || b[2] != 0 {
		t.Fatalf("prefix/compression byte: %q", b[:3])
	}
	msg := b[7:]
	if n := binary.BigEndian.Uint32(b[3:7]); int(n) != len(msg) {
		t.Fatalf("frame length %d, message %d", n, len(msg))
	}
	top := fields(t, msg)
	if string(top[1][0]) != "sluice" {
		t.Errorf("domain %q", top[1][0])
	}
	if varint(t, top[3][0]) != 7 {
		t.Errorf("hits_addend")
	}
	if len(top[2]) != 1 {
		t.Fatalf("want 1 descriptor, got %d", len(top[2]))
	}
	d := fields(t, top[2][0])
	if len(d[1]) != 2 {
		t.Fatalf("want 2 entries")
	}
	for i, want := range r.Entries {
		e := fields(t, d[1][i])
		if string(e[1][0]) != want.Key || string(e[2][0]) != want.Value {
			t.Errorf("entry %d: %q=%q", i, e[1][0], e[2][0])
		}
	}
	o := fields(t, d[2][0])
	if varint(t, o[1][0]) != 100 || varint(t, o[2][0]) != uint64(UnitMinute) {
		t.Errorf("override %v", o)
	}
	// Without limit and hits the fields are absent (proto3 defaults).
	b = AppendFrame(nil, &Request{Domain: "d", Entries: []Entry{{"k", "v"}}})
	top = fields(t, b[5:])
	if len(top[3]) != 0 || len(fields(t, top[2][0])[2]) != 0 {
		t.Errorf("zero fields encoded: %v", top)
	}
}

// response builds a RateLimitResponse the way the service encodes it.
func response(code Code, remaining uint32, reset time.Duration, extra bool) []byte {
	var dur []byte
	if s := int64(reset / time.Second); s > 0 {
		dur = protowire.AppendTag(dur, 1, protowire.VarintType)
		dur = protowire.AppendVarint(dur, uint64(s))
	}
	var st []byte
	st = protowire.AppendTag(st, 1, protowire.VarintType)
	st = protowire.AppendVarint(st, uint64(code))
	// current_limit {requests_per_unit: 100, unit: MINUTE}
	st = protowire.AppendTag(st, 2, protowire.BytesType)
	st = protowire.AppendBytes(st, []byte{0x08, 100, 0x10, 2})
	if remaining > 0 {
		st = protowire.AppendTag(st, 3, protowire.VarintType)
		st = protowire.AppendVarint(st, uint64(remaining))
	}
	st = protowire.AppendTag(st, 4, protowire.BytesType)
	st = protowire.AppendBytes(st, dur)
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(code))
	m = protowire.AppendTag(m, 2, protowire.BytesType)
	m = protowire.AppendBytes(m, st)
	if extra {
		m = protowire.AppendTag(m, 5, protowire.BytesType) // raw_body
		m = protowire.AppendBytes(m, []byte("ignored"))
		m = protowire.AppendTag(m, 99, protowire.Fixed64Type) // unknown
		m = protowire.AppendFixed64(m, 1)
	}
	return frame(m)
}

func frame(m []byte) []byte {
	b := make([]byte, 5, 5+len(m))
	binary.BigEndian.PutUint32(b[1:], uint32(len(m)))
	return append(b, m...)
}

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		code  Code
		rem   uint32
		reset time.Duration
		extra bool
	}{{CodeOK, 42, 17 * time.Second, false}, {CodeOverLimit, 0, 3 * time.Second, true}, {CodeOK, 0, 0, true}} {
		r, err := DecodeFrame(response(c.code, c.rem, c.reset, c.extra))
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != c.code || r.Remaining != c.rem || r.Reset != c.reset || r.Statuses != 1 {
			t.Errorf("%+v: got %+v", c, r)
		}
	}
	for name, b := range map[string][]byte{
		"short":      {0, 0, 0},
		"truncated":  {0, 0, 0, 0, 9, 8},
		"compressed": {1, 0, 0, 0, 0},
		"badtag":     frame([]byte{0xff}),
		"badstatus":  frame([]byte{0x12, 0x02, 0x18, 0xff}),
	} {
		if _, err := DecodeFrame(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestReply(t *testing.T) {
	ok := response(CodeOK, 5, time.Second, false)
	h := [][2]string{{":status", "200"}, {"content-type", "application/grpc"}}
	tr := [][2]string{{"grpc-status", "0"}}
	if r, err := Reply(h, tr, ok); err != nil || r.Remaining != 5 {
		t.Fatalf("%+v %v", r, err)
	}
	// Service down: trailers-only reply with grpc-status 14, empty body.
	down := [][2]string{{":status", "200"}, {"grpc-status", "14"}, {"grpc-message", "upstream connect error"}}
	if _, err := Reply(down, nil, nil); err == nil {
		t.Error("grpc-status 14 accepted")
	} else if ce, _ := err.(*CallError); ce == nil || ce.GRPCStatus != 14 {
		t.Errorf("error %v", err)
	}
	if _, err := Reply(nil, nil, nil); err == nil {
		t.Error("no headers (timeout) accepted")
	}
	if _, err := Reply([][2]string{{":status", "503"}}, nil, nil); err == nil {
		t.Error("503 accepted")
	}
	if _, err := Reply(h, nil, ok); err == nil {
		t.Error("missing grpc-status accepted")
	}
	if _, err := Reply(h, tr, frame(nil)); err == nil {
		t.Error("empty response (code UNKNOWN) accepted")
	}
}

func TestUnitOf(t *testing.T) {
	for w, u := range map[time.Duration]Unit{time.Second: UnitSecond, time.Minute: UnitMinute, time.Hour: UnitHour, 24 * time.Hour: UnitDay} {
		if got, ok := UnitOf(w); !ok || got != u {
			t.Errorf("%v: %v", w, got)
		}
	}
	if _, ok := UnitOf(2 * time.Second); ok {
		t.Error("2s accepted")
	}
}

// FuzzDecodeFrame: the decoder never panics, and what it accepts it
// decodes the same way twice.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(response(CodeOK, 42, 17*time.Second, false))
	f.Add(response(CodeOverLimit, 0, 3*time.Second, true))
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Add(frame([]byte{0x12, 0x02, 0x22, 0x00}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r1, err1 := DecodeFrame(b)
		r2, err2 := DecodeFrame(bytes.Clone(b))
		if r1 != r2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic")
		}
		if err1 == nil && (r1.Reset < 0 || r1.Reset > maxReset) {
			t.Fatalf("reset %v out of range", r1.Reset)
		}
	})
}
