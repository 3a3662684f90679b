package par

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestTwo(t *testing.T) {
	var ran atomic.Int32
	e1, e2 := errors.New("first"), errors.New("second")
	if err := Two(func() error { ran.Add(1); return nil }, func() error { ran.Add(1); return nil }); err != nil || ran.Load() != 2 {
		t.Fatalf("err %v, ran %d; want nil, 2", err, ran.Load())
	}
	if err := Two(func() error { return e1 }, func() error { return e2 }); err != e1 {
		t.Fatalf("both fail: %v, want the first half's", err)
	}
	if err := Two(func() error { return nil }, func() error { return e2 }); err != e2 {
		t.Fatalf("second fails: %v", err)
	}
	for _, c := range []struct {
		name          string
		first, second func() error
	}{
		{"first", func() error { panic("boom") }, func() error { return nil }},
		{"second", func() error { return nil }, func() error { panic("boom") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var finished atomic.Bool
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("recovered %v, want the half's panic", p)
				}
				if !finished.Load() {
					t.Fatal("Two returned before the other half finished")
				}
			}()
			wrap := func(f func() error) func() error {
				return func() error {
					defer finished.Store(true)
					time.Sleep(20 * time.Millisecond) // the other half panics meanwhile
					return f()
				}
			}
			if c.name == "first" {
				Two(c.first, wrap(c.second))
			} else {
				Two(wrap(c.first), c.second)
			}
		})
	}
}
