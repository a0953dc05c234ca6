package market

// offerKeys maps offer ids to their bucket keys in the index. The store's
// ids count up from 1, so ids up to a few times the number of offers are
// kept in a slice, 2 bytes each (the key plus one; 0 is absent), where a
// Go map takes 19–39 bytes an entry; any other id (zero, negative, or far
// beyond), and the key 65,535, is kept in a map. An id set in the map before the slice reached
// it stays there until it is set again.
type offerKeys struct {
	dense  []uint16
	sparse map[int64]uint16
	n      int
}

// denseSlack is how far beyond four times the offers' count ids still go
// in the slice.
const denseSlack = 1 << 16

func newOfferKeys(n int) offerKeys {
	return offerKeys{sparse: map[int64]uint16{}, dense: make([]uint16, 0, n+1)}
}

func (o *offerKeys) inDense(id int64) bool { return id > 0 && id < int64(len(o.dense)) }

func (o *offerKeys) get(id int64) (uint16, bool) {
	if o.inDense(id) && o.dense[id] != 0 {
		return o.dense[id] - 1, true
	}
	if len(o.sparse) == 0 {
		return 0, false
	}
	k, ok := o.sparse[id]
	return k, ok
}

func (o *offerKeys) set(id int64, k uint16) {
	if _, ok := o.get(id); !ok {
		o.n++
	}
	if !o.inDense(id) && id > 0 && id < 4*int64(o.n)+denseSlack {
		if id >= int64(cap(o.dense)) {
			grown := make([]uint16, id+1, max(id+1, int64(cap(o.dense))*3/2))
			copy(grown, o.dense)
			o.dense = grown
		} else {
			o.dense = o.dense[:id+1]
		}
	}
	if o.inDense(id) && k < maxDenseKey {
		delete(o.sparse, id)
		o.dense[id] = k + 1
		return
	}
	if o.inDense(id) {
		o.dense[id] = 0
	}
	o.sparse[id] = k
}

// maxDenseKey: the last key of the largest catalogue has no key plus one
// in 2 bytes, so it is kept in the map.
const maxDenseKey = 1<<16 - 1

func (o *offerKeys) remove(id int64) {
	if _, ok := o.get(id); !ok {
		return
	}
	o.n--
	if o.inDense(id) {
		o.dense[id] = 0
	}
	delete(o.sparse, id)
}

func (o *offerKeys) len() int { return o.n }
