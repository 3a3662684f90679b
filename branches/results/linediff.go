package results

// A line diff for unified hunks: Myers' O(ND) algorithm on line ids,
// after trimming the common head and tail. Past maxEdits differences it
// gives up on a minimal script and replaces the middle whole, which is
// still a correct patch.

const maxEdits = 2000

type opKind byte

const (
	opEqual opKind = iota
	opDelete
	opInsert
)

type lineOp struct {
	kind opKind
	a, b int // line index in old (equal, delete) and new (equal, insert)
}

// splitLines splits data after every '\n'; the last line may lack one.
func splitLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		i := 0
		for i < len(data) && data[i] != '\n' {
			i++
		}
		if i < len(data) {
			i++
		}
		out = append(out, data[:i])
		data = data[i:]
	}
	return out
}

// diffLines returns the edit script turning a into b.
func diffLines(a, b [][]byte) []lineOp {
	ids := map[string]int{}
	id := func(l []byte) int {
		if v, ok := ids[string(l)]; ok {
			return v
		}
		ids[string(l)] = len(ids)
		return len(ids) - 1
	}
	x := make([]int, len(a))
	for i, l := range a {
		x[i] = id(l)
	}
	y := make([]int, len(b))
	for i, l := range b {
		y[i] = id(l)
	}
	var ops []lineOp
	head := 0
	for head < len(x) && head < len(y) && x[head] == y[head] {
		ops = append(ops, lineOp{opEqual, head, head})
		head++
	}
	tail := 0
	for tail < len(x)-head && tail < len(y)-head && x[len(x)-1-tail] == y[len(y)-1-tail] {
		tail++
	}
	mid := myers(x[head:len(x)-tail], y[head:len(y)-tail])
	for _, op := range mid {
		op.a += head
		op.b += head
		ops = append(ops, op)
	}
	for i := tail; i > 0; i-- {
		ops = append(ops, lineOp{opEqual, len(x) - i, len(y) - i})
	}
	return ops
}

// myers returns a shortest edit script from x to y, or delete-all then
// insert-all when it needs more than maxEdits edits.
func myers(x, y []int) []lineOp {
	n, m := len(x), len(y)
	replace := func() []lineOp {
		ops := make([]lineOp, 0, n+m)
		for i := range n {
			ops = append(ops, lineOp{opDelete, i, 0})
		}
		for j := range m {
			ops = append(ops, lineOp{opInsert, n, j})
		}
		return ops
	}
	if n == 0 || m == 0 {
		return replace()
	}
	max := n + m
	if max > maxEdits {
		max = maxEdits
	}
	off := max + 1
	v := make([]int32, 2*max+3)
	var trace [][]int32
	found := -1
	for d := 0; d <= max && found < 0; d++ {
		// The snapshot of v before step d, only the diagonals it used.
		snap := make([]int32, 2*d+1)
		copy(snap, v[off-d:off+d+1])
		trace = append(trace, snap)
		for k := -d; k <= d; k += 2 {
			var xi int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				xi = int(v[off+k+1])
			} else {
				xi = int(v[off+k-1]) + 1
			}
			yi := xi - k
			for xi < n && yi < m && x[xi] == y[yi] {
				xi++
				yi++
			}
			v[off+k] = int32(xi)
			if xi >= n && yi >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return replace()
	}
	// Walk back through the snapshots.
	var rev []lineOp
	xi, yi := n, m
	for d := found; d > 0; d-- {
		vd := trace[d] // v before step d: diagonals -(d-1)..(d-1) at index k+d
		at := func(k int) int { return int(vd[k+d]) }
		k := xi - yi
		var prevK int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for xi > prevX && yi > prevY {
			xi--
			yi--
			rev = append(rev, lineOp{opEqual, xi, yi})
		}
		if xi == prevX {
			yi--
			rev = append(rev, lineOp{opInsert, xi, yi})
		} else {
			xi--
			rev = append(rev, lineOp{opDelete, xi, yi})
		}
	}
	for xi > 0 && yi > 0 {
		xi--
		yi--
		rev = append(rev, lineOp{opEqual, xi, yi})
	}
	ops := make([]lineOp, len(rev))
	for i, op := range rev {
		ops[len(rev)-1-i] = op
	}
	return ops
}
