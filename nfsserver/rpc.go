package nfsserver

// ONC RPC v2 (RFC 5531) constants. go-nfs's acceptance enum is off by one
// after SUCCESS, so we define the wire values here.
const (
	rpcVersion = 2

	msgCall  = 0
	msgReply = 1

	replyAccepted = 0
	replyDenied   = 1

	// accept_stat
	acceptSuccess      = 0
	acceptProgUnavail  = 1
	acceptProgMismatch = 2
	acceptProcUnavail  = 3
	acceptGarbageArgs  = 4
	acceptSystemErr    = 5

	// reject_stat
	rejectRPCMismatch = 0
	rejectAuthError   = 1

	// auth_flavor
	authNull  = 0
	authUnix  = 1 // AUTH_SYS
	authShort = 2

	// auth_stat
	authBadCred = 1
	authTooWeak = 5

	progNFS   = 100003
	progMount = 100005
	versNFS   = 3
	versMount = 3

	maxAuthBody = 400 // RFC 5531: opaque_auth bodies are at most 400 bytes
	maxGids     = 16  // AUTH_UNIX carries at most 16 supplementary groups
	maxMachine  = 255
)

// cred is the caller's identity: AUTH_UNIX as sent, or the anonymous ids for
// AUTH_NULL.
type cred struct {
	flavor  uint32
	uid     uint32
	gid     uint32
	gids    []uint32
	machine string
}

func (c *cred) inGroup(g uint32) bool {
	if c.gid == g {
		return true
	}
	for _, x := range c.gids {
		if x == g {
			return true
		}
	}
	return false
}

// parseCred decodes the call's credential. ok is false for a flavor we do
// not accept or a malformed AUTH_UNIX body.
func (s *Server) parseCred(flavor uint32, body []byte) (c cred, ok bool) {
	switch flavor {
	case authNull, authShort:
		return cred{flavor: authNull, uid: s.opts.AnonUID, gid: s.opts.AnonGID}, true
	case authUnix:
		d := decoder{b: body}
		d.u32() // stamp
		c.flavor = authUnix
		c.machine = d.string(maxMachine)
		c.uid = d.u32()
		c.gid = d.u32()
		n := d.u32()
		if n > maxGids {
			return cred{}, false
		}
		if n > 0 && d.err == nil {
			c.gids = make([]uint32, 0, n)
			for i := uint32(0); i < n; i++ {
				c.gids = append(c.gids, d.u32())
			}
		}
		if d.err != nil {
			return cred{}, false
		}
		return c, true
	}
	return cred{}, false
}
