// Package workload holds the client-side NFS workloads of the benchmark:
// sequential throughput and small-file metadata, driven through
// bench/nfsclient so that every server gets exactly the same RPCs.
package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/branchnfs/branchnfs/bench/nfsclient"
)

// ReadBuffer returns a buffer of n bytes for data read back, with every
// page already written: a fresh allocation of that size comes from new
// pages that fault in as the client first writes them, which would put
// the client's page faults (dear on a virtual machine) into the timed
// read, in some runs and not others (when Go reuses the memory of an
// earlier run instead). Every page is written with bytes of its own, not
// zeros nor one pattern for all, which a host may merge into one page and
// fault apart again on the next write. The bytes are not meaningful. (The
// first timed read into such a buffer still took 0.3 s more of the
// client's copy than later ones, whatever it held: nfsbench reads once,
// untimed, first.)
func ReadBuffer(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9e3779b97f4a7c15)
	for i := 0; i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), 'b', 'e', 'n', 'c', 'h'}))
	p := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		p[i] = byte(r.Uint32())
	}
	return p
}

// Stamp copies base into dst (as long as base) and writes salt into the
// first 8 bytes of every 4 KiB: content that a store which keeps each
// block once (branchnfs) does not hold yet, for any salt not used before.
func Stamp(dst, base []byte, salt uint64) {
	copy(dst, base)
	for i := 0; i+8 <= len(dst); i += 4096 {
		binary.LittleEndian.PutUint64(dst[i:], salt)
	}
}

// SeqOptions configures Seq.
type SeqOptions struct {
	Name    string // file name in the export's root
	ReqSize int    // bytes per READ/WRITE (capped by the server's rtmax/wtmax)
	Conns   int    // TCP connections
	Depth   int    // requests in flight per connection
	// Keep leaves the file in place afterwards (Seq removes it otherwise).
	Keep bool
	// BeforeRead and AfterRead, when set, run just before and just after
	// the read phase (to sample the server's CPU time around it).
	BeforeRead, AfterRead func()
	// Back, when at least as long as the file, is the buffer the read
	// goes into (else one from ReadBuffer). A caller timing several
	// servers gives each the same buffer, made once: a new one per read
	// put into some servers' figures, and not others', the cost of the
	// client's first use of memory the guest had handed back to its host
	// (on this machine, up to ten times the cost of its copy; see
	// docs/benchmarks.md).
	Back []byte
}

// readBuffer returns o.Back if it holds n bytes, else ReadBuffer(n),
// with a byte of every page written again, so that a page the guest
// dropped since the last read faults back in before the timed copy, not
// during it. (It did not remove the first read's extra cost, for which
// nfsbench reads once untimed; it costs a few milliseconds, untimed.)
func (o SeqOptions) readBuffer(n int) []byte {
	if len(o.Back) < n {
		return ReadBuffer(n)
	}
	b := o.Back[:n]
	for i := 0; i < n; i += 4096 {
		b[i] ^= 0xff
	}
	return b
}

// SeqResult is one sequential write+read of a file.
type SeqResult struct {
	Bytes         int64   `json:"bytes"`
	WriteSeconds  float64 `json:"write_seconds"` // UNSTABLE writes + COMMIT
	ReadSeconds   float64 `json:"read_seconds"`
	WriteMiBps    float64 `json:"write_mibps"`
	ReadMiBps     float64 `json:"read_mibps"`
	ReqWrite      int     `json:"req_write"`
	ReqRead       int     `json:"req_read"`
	ChecksumMatch bool    `json:"checksum_match"`
}

// Seq writes data to a new file with UNSTABLE writes followed by a COMMIT,
// then reads it back and compares SHA-256 digests. Requests go out over
// o.Conns connections with o.Depth in flight on each, in ascending offsets.
func Seq(t nfsclient.Target, data []byte, o SeqOptions) (SeqResult, error) {
	var res SeqResult
	c0, err := nfsclient.Dial(t)
	if err != nil {
		return res, err
	}
	defer c0.Close()
	conns := []*nfsclient.Conn{c0}
	for len(conns) < o.Conns {
		c, err := nfsclient.DialHandle(t, c0.Root)
		if err != nil {
			return res, err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	_ = c0.Remove(c0.Root, o.Name)
	fh, err := c0.Create(c0.Root, o.Name, 0o644)
	if err != nil {
		return res, err
	}
	wreq := min(o.ReqSize, int(c0.WTMax))
	rreq := min(o.ReqSize, int(c0.RTMax))
	res.Bytes, res.ReqWrite, res.ReqRead = int64(len(data)), wreq, rreq

	start := time.Now()
	err = parallel(conns, o.Depth, len(data), wreq, func(c *nfsclient.Conn, off, end int) error {
		return c.WriteFull(fh, uint64(off), data[off:end], nfsclient.Unstable)
	})
	if err == nil {
		err = c0.Commit(fh)
	}
	if err != nil {
		return res, fmt.Errorf("write: %w", err)
	}
	res.WriteSeconds = time.Since(start).Seconds()
	a, err := c0.GetAttr(fh)
	if err != nil {
		return res, err
	}
	if a.Filesize != uint64(len(data)) {
		return res, fmt.Errorf("size after write is %d, want %d", a.Filesize, len(data))
	}

	back := o.readBuffer(len(data))
	if o.BeforeRead != nil {
		o.BeforeRead()
	}
	start = time.Now()
	err = parallel(conns, o.Depth, len(data), rreq, func(c *nfsclient.Conn, off, end int) error {
		return c.ReadFull(fh, uint64(off), back[off:end])
	})
	if o.AfterRead != nil {
		o.AfterRead()
	}
	if err != nil {
		return res, fmt.Errorf("read: %w", err)
	}
	res.ReadSeconds = time.Since(start).Seconds()
	res.ChecksumMatch = sha256.Sum256(back) == sha256.Sum256(data)
	mib := float64(len(data)) / (1 << 20)
	res.WriteMiBps, res.ReadMiBps = mib/res.WriteSeconds, mib/res.ReadSeconds
	if !res.ChecksumMatch {
		return res, fmt.Errorf("checksum mismatch after read back (first differing byte at %d)", firstDiff(data, back))
	}
	if o.Keep {
		return res, nil
	}
	if err := c0.Remove(c0.Root, o.Name); err != nil {
		return res, fmt.Errorf("remove: %w", err)
	}
	return res, nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// parallel splits [0,total) into req-sized chunks handed out in ascending
// order to len(conns)*depth workers; worker w uses conns[w%len(conns)].
func parallel(conns []*nfsclient.Conn, depth, total, req int, fn func(c *nfsclient.Conn, off, end int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < len(conns)*max(depth, 1); w++ {
		wg.Add(1)
		go func(c *nfsclient.Conn) {
			defer wg.Done()
			for {
				off := int(next.Add(int64(req))) - req
				if off >= total {
					return
				}
				if err := fn(c, off, min(off+req, total)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(total))
					return
				}
			}
		}(conns[w%len(conns)])
	}
	wg.Wait()
	return first
}

// MetaOptions configures Meta.
type MetaOptions struct {
	Dir      string // directory created in the export's root
	Files    int
	FileSize int
	Workers  int // each with its own connection
	// CPU, when set, returns the CPU time (seconds) the server has used
	// so far; Meta samples it around each phase for MetaResult's CPU
	// figures.
	CPU func() float64
}

// MetaResult gives operations per second for each phase.
type MetaResult struct {
	Files      int     `json:"files"`
	Workers    int     `json:"workers"`
	CreateOps  float64 `json:"create_ops"` // CREATE + one FILE_SYNC WRITE per file
	StatOps    float64 `json:"stat_ops"`   // LOOKUP per file (returns attributes)
	ListOps    float64 `json:"list_ops"`   // entries per second of one full READDIRPLUS listing
	ListCalls  int     `json:"list_calls"`
	RemoveOps  float64 `json:"remove_ops"` // REMOVE per file
	ListSecond float64 `json:"list_seconds"`
	// The server's CPU time (user + system) per operation of each phase
	// (per entry for the listing), in microseconds; 0 without
	// MetaOptions.CPU.
	CreateCPU float64 `json:"create_cpu_us,omitempty"`
	StatCPU   float64 `json:"stat_cpu_us,omitempty"`
	ListCPU   float64 `json:"list_cpu_us,omitempty"`
	RemoveCPU float64 `json:"remove_cpu_us,omitempty"`
}

// Meta creates o.Files files of o.FileSize bytes in a new directory, stats
// each, lists the directory, checks the listing, and removes every file.
func Meta(t nfsclient.Target, o MetaOptions) (MetaResult, error) {
	res := MetaResult{Files: o.Files, Workers: o.Workers}
	c0, err := nfsclient.Dial(t)
	if err != nil {
		return res, err
	}
	defer c0.Close()
	conns := []*nfsclient.Conn{c0}
	for len(conns) < o.Workers {
		c, err := nfsclient.DialHandle(t, c0.Root)
		if err != nil {
			return res, err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	dir, err := c0.Mkdir(c0.Root, o.Dir, 0o755)
	if err != nil {
		return res, fmt.Errorf("mkdir %s: %w", o.Dir, err)
	}
	content := Data(7, o.FileSize)
	name := func(i int) string { return fmt.Sprintf("f%06d", i) }
	cpu := func() float64 {
		if o.CPU == nil {
			return 0
		}
		return o.CPU()
	}
	perOp := func(cpu0 float64, ops int) float64 {
		if o.CPU == nil || ops == 0 {
			return 0
		}
		return (cpu() - cpu0) * 1e6 / float64(ops)
	}
	phase := func(fn func(c *nfsclient.Conn, i int) error) (float64, error) {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for _, c := range conns {
			wg.Add(1)
			go func(c *nfsclient.Conn) {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= o.Files {
						return
					}
					if err := fn(c, i); err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("%s: %w", name(i), err)
						}
						mu.Unlock()
						next.Store(int64(o.Files))
						return
					}
				}
			}(c)
		}
		wg.Wait()
		return float64(o.Files) / time.Since(start).Seconds(), first
	}
	cpu0 := cpu()
	res.CreateOps, err = phase(func(c *nfsclient.Conn, i int) error {
		fh, err := c.Create(dir, name(i), 0o644)
		if err != nil {
			return err
		}
		return c.WriteFull(fh, 0, content, nfsclient.FileSync)
	})
	if err != nil {
		return res, fmt.Errorf("create: %w", err)
	}
	res.CreateCPU = perOp(cpu0, o.Files)
	cpu0 = cpu()
	res.StatOps, err = phase(func(c *nfsclient.Conn, i int) error {
		_, a, err := c.Lookup(dir, name(i))
		if err == nil && a.Filesize != uint64(o.FileSize) {
			err = fmt.Errorf("size %d, want %d", a.Filesize, o.FileSize)
		}
		return err
	})
	if err != nil {
		return res, fmt.Errorf("stat: %w", err)
	}
	res.StatCPU = perOp(cpu0, o.Files)
	cpu0 = cpu()
	start := time.Now()
	ents, calls, err := c0.ReadDirPlus(dir, 64<<10)
	if err != nil {
		return res, fmt.Errorf("list: %w", err)
	}
	res.ListSecond = time.Since(start).Seconds()
	res.ListCPU = perOp(cpu0, len(ents))
	res.ListOps, res.ListCalls = float64(len(ents))/res.ListSecond, calls
	if len(ents) != o.Files {
		return res, fmt.Errorf("list: %d entries, want %d", len(ents), o.Files)
	}
	// Spot-check one file's content.
	fh, _, err := c0.Lookup(dir, name(o.Files/2))
	if err != nil {
		return res, err
	}
	back := make([]byte, o.FileSize)
	if err := c0.ReadFull(fh, 0, back); err != nil || !bytes.Equal(back, content) {
		return res, fmt.Errorf("content of %s differs after create (err %v)", name(o.Files/2), err)
	}
	cpu0 = cpu()
	res.RemoveOps, err = phase(func(c *nfsclient.Conn, i int) error { return c.Remove(dir, name(i)) })
	if err != nil {
		return res, fmt.Errorf("remove: %w", err)
	}
	res.RemoveCPU = perOp(cpu0, o.Files)
	return res, nil
}

// ReadExisting reads an existing file of the export's root, name, with the
// same request pattern as Seq, and compares it with want. It returns MiB/s.
func ReadExisting(t nfsclient.Target, name string, want []byte, o SeqOptions) (float64, error) {
	c0, err := nfsclient.Dial(t)
	if err != nil {
		return 0, err
	}
	defer c0.Close()
	conns := []*nfsclient.Conn{c0}
	for len(conns) < o.Conns {
		c, err := nfsclient.DialHandle(t, c0.Root)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		conns = append(conns, c)
	}
	fh, a, err := c0.Lookup(c0.Root, name)
	if err != nil {
		return 0, err
	}
	if a.Filesize != uint64(len(want)) {
		return 0, fmt.Errorf("%s has %d bytes, want %d", name, a.Filesize, len(want))
	}
	back := o.readBuffer(len(want))
	start := time.Now()
	err = parallel(conns, o.Depth, len(want), min(o.ReqSize, int(c0.RTMax)), func(c *nfsclient.Conn, off, end int) error {
		return c.ReadFull(fh, uint64(off), back[off:end])
	})
	if err != nil {
		return 0, err
	}
	secs := time.Since(start).Seconds()
	if sha256.Sum256(back) != sha256.Sum256(want) {
		return 0, fmt.Errorf("%s: checksum mismatch (first differing byte at %d)", name, firstDiff(want, back))
	}
	return float64(len(want)) / (1 << 20) / secs, nil
}
