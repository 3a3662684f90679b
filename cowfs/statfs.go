package cowfs

import "syscall"

func statFS(dir string) (StatFS, error) {
	if dir == "" {
		dir = "."
	}
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return StatFS{}, wrap("statfs", dir, err)
	}
	bs := uint64(s.Bsize)
	return StatFS{
		TotalBytes: uint64(s.Blocks) * bs,
		FreeBytes:  uint64(s.Bfree) * bs,
		AvailBytes: uint64(s.Bavail) * bs,
		TotalFiles: uint64(s.Files),
		FreeFiles:  uint64(s.Ffree),
	}, nil
}
