//go:build go1.25

package header

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// The server's Date in parseCases: now, or 10 min fast.
var (
	date  = now.Format(http.TimeFormat)
	ahead = now.Add(10 * time.Minute)
)

type parseCase struct {
	name string
	h    http.Header
	want Info
	ok   bool
}

func TestParse(t *testing.T) {
	for _, tt := range parseCases {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse(tt.h, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Parse() = %+v, %v\nwant      %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

var parseCases = []parseCase{
	{"empty", hdr(), Info{}, false},
	{"unrelated", hdr("Content-Type", "text/plain", "Date", date), Info{}, false},

	// Retry-After.
	{"retry-after seconds", hdr("Retry-After", "120"),
		Info{RetryAfter: 120 * time.Second, Has: HasRetryAfter}, true},
	{"retry-after whitespace", hdr("Retry-After", " \t5 "),
		Info{RetryAfter: 5 * time.Second, Has: HasRetryAfter}, true},
	{"retry-after zero", hdr("Retry-After", "0"), Info{Has: HasRetryAfter}, true},
	{"retry-after fraction", hdr("Retry-After", "1.5"),
		Info{RetryAfter: 1500 * time.Millisecond, Has: HasRetryAfter}, true},
	{"retry-after negative", hdr("Retry-After", "-1"), Info{}, false},
	{"retry-after garbage", hdr("Retry-After", "soon"), Info{}, false},
	{"retry-after empty", hdr("Retry-After", ""), Info{}, false},
	{"retry-after trailing junk", hdr("Retry-After", "5s"), Info{}, false},
	{"retry-after huge saturates", hdr("Retry-After", "99999999999999999999999"),
		Info{RetryAfter: math.MaxInt64, Has: HasRetryAfter}, true},
	{"retry-after IMF-fixdate", hdr("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)),
		Info{RetryAfter: 90 * time.Second, Has: HasRetryAfter}, true},
	{"retry-after RFC 850", hdr("Retry-After", now.Add(30*time.Second).Format(time.RFC850)),
		Info{RetryAfter: 30 * time.Second, Has: HasRetryAfter}, true},
	{"retry-after asctime", hdr("Retry-After", now.Add(45*time.Second).Format(time.ANSIC)),
		Info{RetryAfter: 45 * time.Second, Has: HasRetryAfter}, true},
	{"retry-after date in the past", hdr("Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)),
		Info{Has: HasRetryAfter}, true},
	{"retry-after date against a skewed Date", hdr(
		"Date", ahead.Format(http.TimeFormat),
		"Retry-After", ahead.Add(30*time.Second).Format(http.TimeFormat)),
		Info{RetryAfter: 30 * time.Second, Has: HasRetryAfter}, true},
	{"retry-after date with a bad Date falls back to now", hdr(
		"Date", "yesterday",
		"Retry-After", now.Add(30*time.Second).Format(http.TimeFormat)),
		Info{RetryAfter: 30 * time.Second, Has: HasRetryAfter}, true},

	// IETF draft structured fields.
	{"draft single", hdr(
		"RateLimit-Policy", `"burst";q=100;w=60`,
		"RateLimit", `"burst";r=50;t=30`),
		Info{Limit: 100, Remaining: 50, Reset: 30 * time.Second, Window: time.Minute,
			Policy: "burst", Has: HasLimit | HasRemaining | HasReset | HasWindow}, true},
	{"draft picks the most constrained item", hdr(
		"RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
		"RateLimit", `"burst";r=50;t=30, "daily";r=0;t=3600`),
		Info{Limit: 1000, Remaining: 0, Reset: time.Hour, Window: 24 * time.Hour,
			Policy: "daily", Has: HasLimit | HasRemaining | HasReset | HasWindow}, true},
	{"draft tie on remaining takes the later reset", hdr(
		"RateLimit", `"a";r=0;t=5, "b";r=0;t=50, "c";r=0;t=7`),
		Info{Reset: 50 * time.Second, Policy: "b", Has: HasRemaining | HasReset}, true},
	{"draft items across field lines", hdr(
		"RateLimit", `"a";r=9;t=5`,
		"RateLimit", `"b";r=2;t=1`),
		Info{Remaining: 2, Reset: time.Second, Policy: "b", Has: HasRemaining | HasReset}, true},
	{"draft malformed items are skipped", hdr(
		"RateLimit", `"a";r=-1;t=5, garbage!!, "x";r=1.5, ("in" "ner");r=1, "b";r=3;t=7, "c";t=1, 42`),
		Info{Remaining: 3, Reset: 7 * time.Second, Policy: "b", Has: HasRemaining | HasReset}, true},
	{"draft unterminated string", hdr("RateLimit", `"b";r=3;t=7, "oops;r=0`),
		Info{Remaining: 3, Reset: 7 * time.Second, Policy: "b", Has: HasRemaining | HasReset}, true},
	{"draft token names and extra params", hdr(
		"RateLimit-Policy", `burst;q=10;w=1;qu="requests";pk=:cHsx:`,
		"RateLimit", `burst;r=4;t=1;pk=:cHsx:`),
		Info{Limit: 10, Remaining: 4, Reset: time.Second, Window: time.Second,
			Policy: "burst", Unit: "requests", Has: HasLimit | HasRemaining | HasReset | HasWindow}, true},
	{"draft escaped name", hdr("RateLimit", `"a\"b";r=1;t=2`),
		Info{Remaining: 1, Reset: 2 * time.Second, Policy: `a"b`, Has: HasRemaining | HasReset}, true},
	{"draft policy without RateLimit takes the slowest rate", hdr(
		"RateLimit-Policy", `"fast";q=100;w=1, "slow";q=1000;w=3600, "bad";q=-3;w=1`),
		Info{Limit: 1000, Window: time.Hour, Policy: "slow", Has: HasLimit | HasWindow}, true},
	{"draft epoch t", hdr("Date", date, "RateLimit", `"x";r=0;t=`+strconv.FormatInt(now.Unix()+20, 10)),
		Info{Reset: 20 * time.Second, Policy: "x", Has: HasRemaining | HasReset}, true},
	{"draft -07 dictionary", hdr("RateLimit", `limit=100, remaining=50, reset=5`),
		Info{Limit: 100, Remaining: 50, Reset: 5 * time.Second, Has: HasLimit | HasRemaining | HasReset}, true},
	{"draft overrides legacy", hdr(
		"RateLimit", `"r";r=1;t=2`, "RateLimit-Policy", `"r";q=10;w=60`,
		"X-RateLimit-Limit", "99", "X-RateLimit-Remaining", "98", "X-RateLimit-Reset", "97"),
		Info{Limit: 10, Remaining: 1, Reset: 2 * time.Second, Window: time.Minute,
			Policy: "r", Has: HasLimit | HasRemaining | HasReset | HasWindow}, true},
	{"draft garbage only", hdr("RateLimit", `;;;"`, "RateLimit-Policy", `"p";w=5`), Info{}, false},

	// X-RateLimit-*.
	{"legacy delta reset", hdr("X-RateLimit-Limit", "60", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30"),
		Info{Limit: 60, Remaining: 0, Reset: 30 * time.Second, Has: HasLimit | HasRemaining | HasReset}, true},
	{"legacy lower-case names", http.Header{"x-ratelimit-limit": {"60"}}, Info{}, false},
	{"github epoch reset with Date", hdr(
		"Date", ahead.Format(http.TimeFormat),
		"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0", "X-RateLimit-Used", "5000",
		"X-RateLimit-Reset", strconv.FormatInt(ahead.Unix()+600, 10)),
		Info{Limit: 5000, Reset: 10 * time.Minute, Has: HasLimit | HasRemaining | HasReset}, true},
	{"github epoch reset without Date", hdr("X-RateLimit-Reset", strconv.FormatInt(now.Unix()+60, 10)),
		Info{Reset: time.Minute, Has: HasReset}, true},
	{"epoch in the past", hdr("X-RateLimit-Reset", strconv.FormatInt(now.Unix()-60, 10)),
		Info{Has: HasReset}, true},
	{"epoch milliseconds", hdr("X-RateLimit-Reset", strconv.FormatInt(now.UnixMilli()+1500, 10)),
		Info{Reset: 1500 * time.Millisecond, Has: HasReset}, true},
	{"epoch with fraction", hdr("X-RateLimit-Reset", strconv.FormatInt(now.Unix()+1, 10)+".25"),
		Info{Reset: 1250 * time.Millisecond, Has: HasReset}, true},
	{"used gives remaining", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Used", "4990"),
		Info{Limit: 5000, Remaining: 10, Has: HasLimit | HasRemaining}, true},
	{"negative remaining is zero", hdr("X-RateLimit-Remaining", "-3"),
		Info{Has: HasRemaining}, true},
	{"negative limit is ignored", hdr("X-RateLimit-Limit", "-3"), Info{}, false},
	{"old draft value with policy", hdr("X-RateLimit-Limit", "100, 100;w=60, 1000;w=3600"),
		Info{Limit: 100, Has: HasLimit}, true},
	{"fractional delta reset", hdr("X-RateLimit-Reset", "0.25"),
		Info{Reset: 250 * time.Millisecond, Has: HasReset}, true},
	{"fraction rounds up", hdr("X-RateLimit-Reset", "0.0000000001"),
		Info{Reset: 1, Has: HasReset}, true},
	{"garbage legacy", hdr("X-RateLimit-Limit", "lots", "X-RateLimit-Remaining", "1e3",
		"X-RateLimit-Reset", "-5", "Retry-After", "Tue, 99 Foo"), Info{}, false},

	// X-Rate-Limit-* and the early draft's single fields.
	{"x-rate-limit", hdr("X-Rate-Limit-Limit", "15", "X-Rate-Limit-Remaining", "14",
		"X-Rate-Limit-Reset", strconv.FormatInt(now.Unix()+900, 10)),
		Info{Limit: 15, Remaining: 14, Reset: 15 * time.Minute, Has: HasLimit | HasRemaining | HasReset}, true},
	{"x-ratelimit beats x-rate-limit", hdr("X-RateLimit-Limit", "1", "X-Rate-Limit-Limit", "2",
		"X-Rate-Limit-Remaining", "2"),
		Info{Limit: 1, Remaining: 2, Has: HasLimit | HasRemaining}, true},
	{"old draft fields", hdr("RateLimit-Limit", "10", "RateLimit-Remaining", "0", "RateLimit-Reset", "7"),
		Info{Limit: 10, Reset: 7 * time.Second, Has: HasLimit | HasRemaining | HasReset}, true},

	// Everything at once, as Sluice sends a rejection.
	{"sluice rejection", hdr(
		"Retry-After", "2",
		"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "6",
		"RateLimit-Policy", `"checkout";q=10;w=60`, "RateLimit", `"checkout";r=0;t=6`),
		Info{Limit: 10, Reset: 6 * time.Second, RetryAfter: 2 * time.Second, Window: time.Minute,
			Policy: "checkout", Has: HasLimit | HasRemaining | HasReset | HasRetryAfter | HasWindow}, true},
}

func TestInfoWait(t *testing.T) {
	tests := []struct {
		in   Info
		want time.Duration
	}{
		{Info{}, 0},
		{Info{Reset: time.Minute, Has: HasReset}, 0},                                                                           // unknown remaining
		{Info{Remaining: 3, Reset: time.Minute, Has: HasRemaining | HasReset}, 0},                                              // quota left
		{Info{Reset: time.Minute, Has: HasRemaining | HasReset}, time.Minute},                                                  // exhausted
		{Info{Reset: time.Minute, RetryAfter: 2 * time.Second, Has: HasRemaining | HasReset | HasRetryAfter}, 2 * time.Second}, // precedence
	}
	for _, tt := range tests {
		if got := tt.in.Wait(); got != tt.want {
			t.Errorf("%+v.Wait() = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestItems(t *testing.T) {
	var got []Item
	for it := range Items(`"a";q=1;w=2, b;r=3;t=4;x, "bad";q=?1, c=5, "d"`) {
		got = append(got, it)
	}
	want := []Item{
		{Name: "a", Quota: 1, Window: 2, Remaining: -1, Reset: -1, Value: -1},
		{Name: "b", Quota: -1, Window: -1, Remaining: 3, Reset: 4, Value: -1},
		{Name: "c", Quota: -1, Window: -1, Remaining: -1, Reset: -1, Value: 5},
		{Name: "d", Quota: -1, Window: -1, Remaining: -1, Reset: -1, Value: -1},
	}
	if len(got) != len(want) {
		t.Fatalf("Items = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("item %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// Stopping early is honoured.
	n := 0
	for range Items(`"a";r=1, "b";r=2`) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("break yielded %d items", n)
	}
}

func TestParseHTTPDateMatchesNetHTTP(t *testing.T) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		" Sun, 06 Nov 1994 08:49:37 GMT ",
		"Sun, 06 Nov 1994 08:49:37 UTC",
		"2026-03-01T12:00:00Z",
		"",
		"garbage",
	} {
		got, ok := ParseHTTPDate(s)
		want, err := http.ParseTime(trimOWS(s))
		if ok != (err == nil) || !got.Equal(want) {
			t.Errorf("ParseHTTPDate(%q) = %v, %v; http.ParseTime = %v, %v", s, got, ok, want, err)
		}
	}
}

func TestParseRetryAfterAndReset(t *testing.T) {
	if d, ok := ParseRetryAfter("7", now); !ok || d != 7*time.Second {
		t.Errorf("ParseRetryAfter(7) = %v, %v", d, ok)
	}
	if d, ok := ParseReset(strconv.FormatInt(now.Unix()+3, 10), now); !ok || d != 3*time.Second {
		t.Errorf("ParseReset(epoch+3) = %v, %v", d, ok)
	}
	if d, ok := ParseReset(strconv.Itoa(EpochSeconds-1), now); !ok || d != (EpochSeconds-1)*time.Second {
		t.Errorf("ParseReset(EpochSeconds-1) = %v, %v: must stay a delta", d, ok)
	}
}

// TestRoundTrip checks that what the plugin formats with the Append
// functions parses back to the same numbers: the plugin and the SDK can
// never disagree.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	durs := []time.Duration{0, 1, time.Millisecond, 999 * time.Millisecond, time.Second,
		time.Second + 1, 90 * time.Second, time.Hour, 24 * time.Hour, 365 * 24 * time.Hour}
	for i := 0; i < 2000; i++ {
		var limit, remaining int64
		var window, reset, wait time.Duration
		if i < len(durs)*len(durs) {
			window, reset = durs[i%len(durs)], durs[i/len(durs)]
			wait = durs[(i+3)%len(durs)]
			limit, remaining = int64(i+1), int64(i%7)-1
		} else {
			limit = r.Int64N(1_000_000) + 1
			remaining = r.Int64N(limit+2) - 1
			window = time.Duration(r.Int64N(int64(30 * 24 * time.Hour)))
			reset = time.Duration(r.Int64N(int64(window + 1)))
			wait = time.Duration(r.Int64N(int64(time.Hour)))
		}
		name := []string{"checkout", "a", "rule_1-x", "0"}[i%4]
		h := http.Header{}
		h.Set(RetryAfter, string(AppendRetryAfter(nil, wait)))
		h.Set(XLimit, strconv.FormatInt(limit, 10))
		h.Set(XRemaining, strconv.FormatInt(max(remaining, 0), 10))
		h.Set(XReset, string(AppendSeconds(nil, reset)))
		h.Set(Policy, string(AppendPolicy(nil, name, limit, window)))
		h.Set(RateLimit, string(AppendRateLimit(nil, name, remaining, reset)))

		want := Info{
			Limit:      int(limit),
			Remaining:  int(max(remaining, 0)),
			Reset:      time.Duration(CeilSeconds(reset)) * time.Second,
			RetryAfter: time.Duration(RetryAfterSeconds(wait)) * time.Second,
			Window:     time.Duration(max(CeilSeconds(window), 1)) * time.Second,
			Policy:     name,
			Has:        HasLimit | HasRemaining | HasReset | HasRetryAfter | HasWindow,
		}
		if window <= 0 {
			// A concurrency limit: the policy has no window.
			want.Window, want.Has = 0, want.Has&^HasWindow
		}
		got, ok := Parse(h, now)
		if !ok || got != want {
			t.Fatalf("round trip of limit=%d remaining=%d window=%v reset=%v wait=%v:\n%v\ngot  %+v\nwant %+v",
				limit, remaining, window, reset, wait, h, got, want)
		}

		// Each family alone says the same.
		legacy := http.Header{}
		for _, k := range []string{XLimit, XRemaining, XReset} {
			legacy.Set(k, h.Get(k))
		}
		gl, _ := Parse(legacy, now)
		if gl.Limit != want.Limit || gl.Remaining != want.Remaining || gl.Reset != want.Reset {
			t.Fatalf("legacy alone: got %+v, want %+v", gl, want)
		}
		draft := http.Header{}
		draft.Set(Policy, h.Get(Policy))
		draft.Set(RateLimit, h.Get(RateLimit))
		gd, _ := Parse(draft, now)
		if gd.Limit != want.Limit || gd.Remaining != want.Remaining || gd.Reset != want.Reset ||
			gd.Window != want.Window || gd.Policy != name {
			t.Fatalf("draft alone: got %+v, want %+v", gd, want)
		}
	}
}

// TestParseAllocs keeps Parse allocation-free on what Sluice sends, since
// the SDK parses every response.
func TestParseAllocs(t *testing.T) {
	h := hdr(
		"Date", now.Format(http.TimeFormat),
		"Retry-After", "2",
		"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "6",
		"RateLimit-Policy", `"checkout";q=10;w=60`, "RateLimit", `"checkout";r=0;t=6`)
	if n := testing.AllocsPerRun(100, func() { Parse(h, now) }); n != 0 {
		t.Errorf("Parse allocates %v times per call", n)
	}
}

func BenchmarkParse(b *testing.B) {
	h := hdr(
		"Date", now.Format(http.TimeFormat),
		"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "6",
		"RateLimit-Policy", `"checkout";q=10;w=60`, "RateLimit", `"checkout";r=3;t=6`)
	b.ReportAllocs()
	for b.Loop() {
		Parse(h, now)
	}
}

// checkInfo asserts the invariants every parse result must hold.
func checkInfo(t *testing.T, in Info, ok bool) {
	t.Helper()
	if in.Reset < 0 || in.RetryAfter < 0 || in.Window < 0 || in.Wait() < 0 {
		t.Fatalf("negative duration: %+v", in)
	}
	if in.Limit < 0 || in.Remaining < 0 {
		t.Fatalf("negative count: %+v", in)
	}
	if ok != (in.Has != 0 || in.Policy != "") {
		t.Fatalf("ok=%v disagrees with %+v", ok, in)
	}
	for f, zero := range map[Fields]bool{
		HasLimit: in.Limit == 0, HasRemaining: in.Remaining == 0, HasReset: in.Reset == 0,
		HasRetryAfter: in.RetryAfter == 0, HasWindow: in.Window == 0,
	} {
		if in.Has&f == 0 && !zero {
			t.Fatalf("field %b set but not in Has: %+v", f, in)
		}
	}
}

func FuzzParse(f *testing.F) {
	d := now.Format(http.TimeFormat)
	f.Add("120", d, `"burst";r=50;t=30`, `"burst";q=100;w=60`, "100", "50", "30", "")
	f.Add(now.Add(time.Minute).Format(time.RFC850), "", `"a";r=0;t=1700000000, "b";r=1`, `"a";q=1;w=1`, "", "", "1700000060", "5")
	f.Add(now.Add(time.Minute).Format(time.ANSIC), d, `limit=100, remaining=50, reset=5`, "", "-1", "-1", "-1", "x")
	f.Add("-1", "garbage", `("x" "y");r=1, "z";r=-1, ;;`, `"p";q=?1;w=@12`, "1e9", "00", "99999999999999999999.999999999999", "1")
	f.Add("1.5", d, `"\"x\\";r=1;t=2;pk=:AAE=:;qu=%"a%20b"`, `tok*/:;q=1;w=0`, " 10 ", "\t3", "0.0000000001", "9")
	f.Add("", "", `"unterminated`, `"a";q=999999999999999;w=999999999999999`, "100, 100;w=60", "", "1.", "")
	// Found by this fuzzer: a dictionary member whose value is a bare "@".
	f.Add("0", "0", "A=@", "", "0", "0", "0", "0")
	f.Fuzz(func(t *testing.T, retryAfter, date, rl, policy, limit, remaining, reset, used string) {
		h := http.Header{}
		for k, v := range map[string]string{
			"Retry-After": retryAfter, "Date": date, "Ratelimit": rl, "Ratelimit-Policy": policy,
			"X-Ratelimit-Limit": limit, "X-Ratelimit-Remaining": remaining, "X-Ratelimit-Reset": reset,
			"X-Ratelimit-Used": used, "X-Rate-Limit-Reset": reset, "Ratelimit-Reset": rl,
		} {
			if v != "" {
				h.Set(k, v)
			}
		}
		in, ok := Parse(h, now)
		checkInfo(t, in, ok)
		// A zero or far-future now must not overflow either.
		in, ok = Parse(h, time.Time{})
		checkInfo(t, in, ok)
		in, ok = Parse(h, time.Unix(1<<40, 0))
		checkInfo(t, in, ok)
	})
}

func FuzzItems(f *testing.F) {
	for _, s := range []string{
		`"burst";q=100;w=60`, `"a";r=50;t=30, "b";r=0;t=3600`, `limit=100, remaining=50, reset=5`,
		`tok;q=1;qu="requests";pk=:cHsx:`, `("inner" "list");r=1, "x";r=1.5`, `"a\"b";r=1`,
		`;;,,  , "`, `"a";r=-1`, `a=?1;b=@1;c=%"%ff"`, `"é";r=1`, `x;r=1234567890123456`, `A=@`, `a;q=-`, `a=:`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := 0
		for it := range Items(s) {
			n++
			if it.Quota < -1 || it.Window < -1 || it.Remaining < -1 || it.Reset < -1 || it.Value < -1 {
				t.Fatalf("negative parameter in %+v from %q", it, s)
			}
		}
		if n > len(s) {
			t.Fatalf("%d items from %d bytes", n, len(s))
		}
		// RateLimit and RateLimit-Policy parsed through Parse hold the invariants too.
		in, ok := Parse(http.Header{"Ratelimit": {s}, "Ratelimit-Policy": {s}}, now)
		checkInfo(t, in, ok)
	})
}

func FuzzParseHTTPDate(f *testing.F) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Mon, 02 Jan 2006 15:04:05 MST", "", "120",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseHTTPDate(s)
		want, err := http.ParseTime(trimOWS(s))
		if ok != (err == nil) || !got.Equal(want) {
			t.Fatalf("ParseHTTPDate(%q) = %v, %v; http.ParseTime = %v, %v", s, got, ok, want, err)
		}
		if d, ok := ParseRetryAfter(s, now); d < 0 || (ok && trimOWS(s) == "") {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
		}
	})
}

// TestParseDraft11: what draft-ietf-httpapi-ratelimit-headers-11 and its
// pending change add to the fields: qu, a for r, w for t in RateLimit, and
// cached responses (Age) whose quota fields are ignored.
func TestParseDraft11(t *testing.T) {
	for _, c := range []struct {
		name string
		h    http.Header
		want Info
		ok   bool
	}{
		{"draft-11 pending spellings a and w, cost c, unit", hdr(
			"RateLimit-Policy", `"bytes";q=1000;w=60;qu="content-bytes"`,
			"RateLimit", `"bytes";a=200;w=30;c=5`),
			Info{Limit: 1000, Remaining: 200, Reset: 30 * time.Second, Window: time.Minute,
				Policy: "bytes", Unit: "content-bytes", Has: HasLimit | HasRemaining | HasReset | HasWindow}, true},
		{"draft-11 r and t win nothing over a and w: the last one read", hdr(
			"RateLimit", `"p";r=3;t=4`),
			Info{Remaining: 3, Reset: 4 * time.Second, Policy: "p", Has: HasRemaining | HasReset}, true},
		{"draft-11 concurrency unit as a token", hdr(
			"RateLimit-Policy", `"slots";q=5;qu=concurrent-requests`,
			"RateLimit", `"slots";r=0;t=1`),
			Info{Limit: 5, Remaining: 0, Reset: time.Second, Policy: "slots", Unit: "concurrent-requests",
				Has: HasLimit | HasRemaining | HasReset}, true},
		{"served from a cache: only Retry-After", hdr(
			"Age", "30", "Retry-After", "2", "RateLimit", `"p";r=0;t=9`, "X-RateLimit-Remaining", "0"),
			Info{RetryAfter: 2 * time.Second, Has: HasRetryAfter}, true},
		{"served from a cache without Retry-After: nothing", hdr(
			"Age", "1", "RateLimit", `"p";r=0;t=9`, "X-RateLimit-Limit", "10"),
			Info{}, false},
		{"Age 0 is fresh", hdr("Age", "0", "RateLimit", `"p";r=1;t=9`),
			Info{Remaining: 1, Reset: 9 * time.Second, Policy: "p", Has: HasRemaining | HasReset}, true},
	} {
		got, ok := Parse(c.h, now)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Parse() = %+v, %v\nwant      %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
