package global

import "testing"

type testCall struct{ n int }

type testReq struct{ id int }

// TestCalls: one call per client kept, a later call's place not taken by
// forgetting an earlier one, and whose stream a call sent now answers to.
func TestCalls(t *testing.T) {
	c := NewCalls()
	k := Key{Rule: 1, FP: 7}
	first, second := &testCall{1}, &testCall{2}
	c.Put(k, first)
	c.Put(k, second) // a later call for the same client
	c.Forget(k, first)
	if got := c.Get(k); got != second || c.Len() != 1 {
		t.Fatalf("after forgetting the earlier call: %v, %d calls", got, c.Len())
	}
	n := 0
	c.Each(func(call any) {
		c.Forget(k, call) // a loop may forget what it is given
		n++
	})
	if n != 1 || c.Len() != 0 || c.Get(k) != nil {
		t.Fatalf("went through %d calls, %d left", n, c.Len())
	}
	p, q := &testReq{1}, &testReq{2}
	if c.Own(p) || c.Owner() != nil {
		t.Fatal("the root context owned by a request")
	}
	c.Answering(p)
	if !c.Own(p) || c.Own(q) || c.Owner() != p {
		t.Fatal("answering p's call: p's stream not the only one current")
	}
	c.Answering(nil)
	c.Deciding(true)
	if !c.Own(q) {
		t.Fatal("deciding: the deciding request's stream not current")
	}
	c.Deciding(false)
	if c.Own(q) {
		t.Fatal("after the decision the stream still current")
	}
}

// TestAsked: the rules set aside and their key bytes, from empty at each
// decision, the buffers reused.
func TestAsked(t *testing.T) {
	var a Asked
	for round := 0; round < 2; round++ {
		a.Begin()
		a.Add(Ref{Rule: 0, Off: a.Key([]byte("client-a")), N: 8})
		a.Add(Ref{Rule: 3, Off: a.Key([]byte("b")), N: 1})
		refs, keys := a.Refs(), a.Keys()
		if len(refs) != 2 || refs[1].Off != 8 || string(keys) != "client-ab" || string(a.KeyOf(refs[0])) != "client-a" {
			t.Fatalf("round %d: refs %v keys %q", round, refs, keys)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		a.Begin()
		a.Add(Ref{Off: a.Key([]byte("client-a")), N: 8})
	}); n != 0 {
		t.Errorf("%v allocations per decision with the buffers grown", n)
	}
}

// TestCallsEachAsAMapRange: Each over the list of calls visits what a
// range over a map would: each client in flight when it began once, with
// its call of the moment; not one forgotten before it was reached, nor
// one put since. The list stays the map's set through Put and Forget.
func TestCallsEachAsAMapRange(t *testing.T) {
	c := NewCalls()
	calls := make([]*testCall, 8)
	for i := range calls {
		calls[i] = &testCall{i}
		c.Put(Key{FP: uint64(i)}, calls[i])
	}
	later := &testCall{100}
	seen := map[int]int{}
	c.Each(func(call any) {
		tc := call.(*testCall)
		seen[tc.n]++
		switch tc.n {
		case 2, 5:
			// Forget two more and replace another's call, whichever
			// come later; put a new client.
			c.Forget(Key{FP: 6}, calls[6])
			c.Forget(Key{FP: uint64(tc.n)}, tc)
			c.Put(Key{FP: 7}, later)
			c.Put(Key{FP: 50}, &testCall{50})
		}
	})
	for n, k := range seen {
		if k != 1 {
			t.Errorf("call %d visited %d times", n, k)
		}
	}
	if seen[50] != 0 {
		t.Error("a client put during Each was visited")
	}
	// The list keeps the order of the puts: 6 and 7 come after 2.
	if seen[6] != 0 || seen[7] != 0 || seen[100] != 1 {
		t.Errorf("visited %v: want client 6 (forgotten before it was reached) not visited, client 7 once with its new call", seen)
	}
	if c.Len() != 6 || c.Get(Key{FP: 6}) != nil || c.Get(Key{FP: 2}) != nil || c.Get(Key{FP: 7}) != later || c.Get(Key{FP: 50}) == nil {
		t.Fatalf("%d calls after Each, want 6 (8 - 3 forgotten + 1 put)", c.Len())
	}
	for i, e := range c.list {
		if j, ok := c.m[e.key]; !ok || j != i {
			t.Fatalf("entry %d of the list (%+v) indexed at %d, %v", i, e.key, j, ok)
		}
	}
}
