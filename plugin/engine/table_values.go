package engine

// The table's reads and writes of its shared-data values (buckets and
// overflow states): each read into the table's own buffer, each write under
// the CAS it was read with, counted for the metrics.

// loadValue reads the value of size bytes at key (a bucket, or an overflow
// state) for a CAS update: its value and CAS, or, for a missing key, a
// zeroed one with createCAS (see Update). A value of the wrong size (not
// ours, or damaged) is started over, zeroed, under the CAS it was read with.
//
// With a BufferStore the value is read into t.fresh: no garbage per read.
// That aliasing is the one a missing key always had: every caller (Update,
// Modify, Lease) decodes, edits and Sets val within one CAS attempt,
// reloads on the next, and gives no view of it to anyone (their callbacks
// get decoded states), and a Table is never re-entered (t.key is scratch
// too).
func (t *Table) loadValue(key string, size int) ([]byte, uint32, error) {
	return t.loadInto(key, size, &t.fresh)
}

// fetch reads key's value into buf when the store can (BufferStore),
// counting a failed read (StoreErrors).
func (t *Table) fetch(key string, buf []byte) (val []byte, cas uint32, found bool, err error) {
	if t.bufs != nil {
		val, cas, found, err = t.bufs.GetInto(key, buf)
	} else {
		val, cas, found, err = t.store.Get(key)
	}
	if err != nil {
		t.Stats.StoreErrors++
	}
	return val, cas, found, err
}

// loadInto is loadValue reading into buf (fetch's read, without its call:
// every request reads a bucket).
func (t *Table) loadInto(key string, size int, buf *[BucketSize]byte) ([]byte, uint32, error) {
	var val []byte
	var cas uint32
	var found bool
	var err error
	if t.bufs != nil {
		val, cas, found, err = t.bufs.GetInto(key, buf[:])
	} else {
		val, cas, found, err = t.store.Get(key)
	}
	if err != nil || !found || len(val) != size {
		return t.loaded(val, cas, found, err, size, buf)
	}
	return val, cas, nil
}

// loaded is the end of loadInto for a read that failed, found no value or
// one of the wrong size.
func (t *Table) loaded(val []byte, cas uint32, found bool, err error, size int, buf *[BucketSize]byte) ([]byte, uint32, error) {
	if err != nil {
		t.Stats.StoreErrors++
		return nil, 0, err
	}
	switch {
	case !found:
		val, cas = buf[:size], createCAS
		clear(val)
	case len(val) != size:
		t.Stats.Corrupt++
		val = buf[:size]
		clear(val)
	}
	return val, cas, nil
}

// write stores slot s of sp (storeSlot); a state moving out of the
// previous layout (sp.from) first marks its old slot as moving, unless it
// is already (layout.go). retry: read again.
func (t *Table) write(sp *spot, s []byte, expiry int64) (retry bool, err error) {
	if sp.from.val != nil && !sp.from.marked {
		if sp.from.stale {
			return t.clearStale(sp)
		}
		if retry, err := t.markMoving(sp); retry || err != nil {
			return retry, err
		}
	}
	return t.storeSlot(sp.key, sp.val, sp.cas, s, sp.fp, expiry)
}

// storeSlot marks slot s of value val as fp's until expiry (the caller
// has encoded the state into s[16:]) and writes the value back under cas.
// retry reports that another worker changed it first: read it again. The
// three CAS loops (Update, Modify, Lease) share it.
func (t *Table) storeSlot(key string, val []byte, cas uint32, s []byte, fp uint64, expiry int64) (retry bool, err error) {
	putUint64(s[0:8], fp)
	putUint64(s[8:16], uint64(expiry))
	// setCounted's write, without its call: every admitted request writes.
	retry, err = t.store.Set(key, val, cas)
	if err != nil {
		t.Stats.StoreErrors++
		return false, err
	}
	if retry {
		t.Stats.CASRetries++
	}
	return retry, nil
}

// setCounted writes a bucket back under cas, counting a failed write
// (StoreErrors) and a CAS mismatch (CASRetries); mismatch: read it again.
func (t *Table) setCounted(key string, val []byte, cas uint32) (mismatch bool, err error) {
	mismatch, err = t.store.Set(key, val, cas)
	if err != nil {
		t.Stats.StoreErrors++
		return false, err
	}
	if mismatch {
		t.Stats.CASRetries++
	}
	return mismatch, nil
}

// LoadValue reads the value of key into buf for a value of size bytes of
// the store's own (the class values of flight.Classes): a missing or
// damaged one reads as free, with createCAS.
func (t *Table) LoadValue(key string, size int, buf []byte) ([]byte, uint32, error) {
	val, cas, found, err := t.fetch(key, buf)
	if err != nil {
		return nil, 0, err
	}
	if !found || len(val) != size {
		if found {
			t.Stats.Corrupt++
		}
		val, cas = buf[:size], createCAS
		clear(val)
	}
	return val, cas, nil
}

// StoreValue writes a value of LoadValue's back under cas (setCounted).
func (t *Table) StoreValue(key string, val []byte, cas uint32) (mismatch bool, err error) {
	return t.setCounted(key, val, cas)
}

// Contended counts an update of the store's that ran out of CAS retries.
func (t *Table) Contended() { t.Stats.CASExhausted++ }
