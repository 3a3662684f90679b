package cowfs

// TEMPORARY: replaced by the real implementation.

import "github.com/branchnfs/branchnfs/kv"

// FS is a copy-on-write view of one layer stack.
type FS struct{ store kv.Store }

func (f *FS) getAttr(ino InodeID) (Attr, error)                { panic("todo") }
func (f *FS) lookup(dir InodeID, name string) (Attr, error)     { panic("todo") }
func (f *FS) create(dir InodeID, name string, how CreateHow, a NewAttr, v uint64) (Attr, error) {
	panic("todo")
}
func (f *FS) mknode(dir InodeID, name string, t FileType, a NewAttr, target string) (Attr, error) {
	panic("todo")
}
func (f *FS) link(ino, dir InodeID, name string) (Attr, error)                 { panic("todo") }
func (f *FS) remove(dir InodeID, name string, isDir bool) error                 { panic("todo") }
func (f *FS) rename(a InodeID, an string, b InodeID, bn string) error           { panic("todo") }
func (f *FS) readAt(ino InodeID, p []byte, off int64) (int, bool, error)        { panic("todo") }
func (f *FS) writeAt(ino InodeID, p []byte, off int64) (Attr, error)            { panic("todo") }
func (f *FS) setAttr(ino InodeID, sa SetAttr) (Attr, error)                     { panic("todo") }
func (f *FS) readlink(ino InodeID) (string, error)                              { panic("todo") }
func (f *FS) readDir(dir InodeID, c uint64, n int) ([]DirEntry, bool, error)    { panic("todo") }
func (f *FS) pathOf(ino InodeID) (string, error)                                { panic("todo") }
// Err reports why the view is no longer usable (nil while it is).
func (f *FS) Err() error { return nil }
// StatFS reports the space of the store's disk.
func (f *FS) StatFS() (StatFS, error) { panic("todo") }
