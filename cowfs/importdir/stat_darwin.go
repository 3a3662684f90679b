package importdir

import (
	"syscall"
	"time"
)

func atime(st *syscall.Stat_t) time.Time { return time.Unix(st.Atimespec.Sec, st.Atimespec.Nsec) }
